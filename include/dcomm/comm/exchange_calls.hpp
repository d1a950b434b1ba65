// The communicator's gather, scatter, all_to_all and all_to_all_v (MPI's, and NCCL 2.28's
// ncclGather/ncclScatter/ncclAlltoAll): each one batch of sends and receives from the one
// definition in algo/exchange.hpp, run like a p2p() batch. A base of Communicator (it supplies
// rank(), size() and p2p()), so that these are its members.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "dcomm/algo/exchange.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/status.hpp"
#include "dcomm/core/types.hpp"

DCOMM_NAMESPACE_BEGIN

template <class Comm>
class ExchangeCalls {
 public:
  // The root's recv holds size()*count elements, rank r's block at r*count (recv is not read
  // elsewhere and may be null). In place on the root when send == recv + root*count.
  Status gather(const void* send, void* recv, size_t count, DataType type, int root) {
    return equal(Exchange::kGather, root, send, recv, count, type);
  }
  // The root's send holds size()*count elements, rank r's block at r*count (read on the root
  // only). In place on the root when recv == send + root*count.
  Status scatter(const void* send, void* recv, size_t count, DataType type, int root) {
    return equal(Exchange::kScatter, root, send, recv, count, type);
  }
  // send's block r (count elements at r*count) goes to rank r; recv's block r comes from rank
  // r. In place when send == recv.
  Status all_to_all(const void* send, void* recv, size_t count, DataType type) {
    return equal(Exchange::kAllToAll, 0, send, recv, count, type);
  }
  // MPI_Alltoallv: send_counts[r] elements at send_displs[r] go to rank r, and rank r's
  // message fills recv_counts[r] elements at recv_displs[r] (torch's all_to_all_single with
  // splits). Each list has size() entries; what rank r sends this rank must be what this rank
  // expects from it (checked by the receive). In place when send == recv.
  Status all_to_all_v(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_displs,
                      void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_displs,
                      DataType type) {
    const size_t n = static_cast<size_t>(self().size());
    for (auto [list, name] : {std::pair{send_counts, "send_counts"}, std::pair{send_displs, "send_displs"},
                              std::pair{recv_counts, "recv_counts"}, std::pair{recv_displs, "recv_displs"}})
      if (list.size() != n)
        return invalid_argument("all_to_all_v on rank ", self().rank(), ": ", name, " has ", list.size(),
                                " entries, not one per rank (", n, ")");
    return exchange(Exchange::kAllToAll, 0, blocks_of(send, send_counts, send_displs, type),
                    blocks_of(recv, recv_counts, recv_displs, type), type);
  }

  // Any of the three over blocks anywhere in memory (torch's lists of tensors): `send` and
  // `recv` hold the blocks this rank's part names (algo/exchange.hpp: gather sends block 0 and
  // the root receives block r from rank r; scatter the reverse; all-to-all block r both ways).
  Status exchange(Exchange what, int root, std::span<const Block> send, std::span<const Block> recv, DataType type) {
    return run(what, exchange_ops(what, self().rank(), self().size(), root, send, recv, type));
  }

 private:
  Comm& self() { return static_cast<Comm&>(*this); }
  Status equal(Exchange what, int root, const void* send, void* recv, size_t count, DataType type) {
    return run(what, equal_exchange_ops(what, self().rank(), self().size(), root, send, recv, count, type));
  }
  Status run(Exchange what, Result<std::vector<P2POp>> ops) {
    if (!ops.ok()) return ops.status();
    return self().p2p(std::move(*ops)).with_context(exchange_name(what));
  }
};

DCOMM_NAMESPACE_END
