// The dcomm torch backend's collectives on host tensors (and the dtypes and reductions they
// take): each checks its tensors, then enqueues one job (process_group.cpp).
#include "on_cuda.hpp"
#include "process_group.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>
#include <string>

namespace dcomm_torch {

using dcomm::DataType;
using dcomm::Status;

// ---- dtypes and ops ------------------------------------------------------------------------

namespace {
std::string dtype_name(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

std::optional<DataType> reduction_type(at::ScalarType s) {
  switch (s) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBfloat16;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kBool: return DataType::kUint8;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
#if TORCH_VERSION_MAJOR >= 2
    case at::kFloat8_e4m3fn: return DataType::kFloat8E4M3;
    case at::kFloat8_e5m2: return DataType::kFloat8E5M2;
#endif
    default: return std::nullopt;
  }
}

// gather's outputs and scatter's inputs at the root: one list of n tensors, each of the size and
// dtype of `like` (the other side of the call).
std::vector<at::Tensor> root_list(const std::vector<std::vector<at::Tensor>>& lists, int n, const at::Tensor& like,
                                  const char* what, const char* role) {
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == n, "dcomm: ", what,
              ": the root needs one list of ", n, " ", role, " tensors");
  for (const auto& t : lists[0])
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(), "dcomm: ", what, ": every ", role,
                " tensor must match the size and dtype of the ", std::string(role) == "input" ? "output" : "input");
  return lists[0];
}

}  // namespace

Reduction reduction_for(const at::Tensor& t, const c10d::ReduceOp& op, const char* what) {
  const auto type = reduction_type(t.scalar_type());
  TORCH_CHECK(type.has_value(), "dcomm: ", what, " cannot reduce tensors of dtype ", dtype_name(t),
              " (supported: float32, float64, float16, bfloat16, int8, uint8, int32, int64, bool",
              TORCH_VERSION_MAJOR >= 2 ? ", float8_e4m3fn, float8_e5m2)" : ")");
  Reduction r{*type, dcomm::ReduceOp::kSum};
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: r.op = is_bool ? dcomm::ReduceOp::kMax : dcomm::ReduceOp::kSum; break;  // logical or
    case c10d::ReduceOp::PRODUCT:
      r.op = is_bool ? dcomm::ReduceOp::kMin : dcomm::ReduceOp::kProd;
      break;  // logical and
    case c10d::ReduceOp::MIN: r.op = dcomm::ReduceOp::kMin; break;
    case c10d::ReduceOp::MAX: r.op = dcomm::ReduceOp::kMax; break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, "dcomm: ", what, " cannot use ReduceOp.AVG with boolean tensors");
      r.op = dcomm::ReduceOp::kAvg;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK(t.is_floating_point(), "dcomm: ", what,
                  " uses ReduceOp.PREMUL_SUM on floating-point tensors only, not ", dtype_name(t));
      auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, "dcomm: ", what, ": PREMUL_SUM without its factor");
#if TORCH_VERSION_MAJOR >= 2
      r.premul = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
#else
      r.premul = s->tensor_factors.empty() ? s->double_factor : s->tensor_factors[0].item<double>();
#endif
      break;
    }
    default:
      TORCH_CHECK(false, "dcomm: ", what, " does not support ReduceOp ", static_cast<int>(op.op_),
                  " (bitwise ops: BAND, BOR, BXOR) on ", dtype_name(t));
  }
  return r;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
#if TORCH_VERSION_MAJOR >= 2
  if (tensors.size() == 1 && tensors[0].layout() == at::kSparse) return allreduce_sparse(tensors, opts);
#endif
  check_one(tensors, "all_reduce");
  at::Tensor t = tensors[0];
  const Reduction r = reduction_for(t, opts.reduceOp, "all_reduce");
  DCOMM_TORCH_ON_CUDA(t, allreduce(t, r));
  return enqueue(c10d::OpType::ALLREDUCE, {t}, nbytes(t), [this, t, r] {
    at::Tensor buf = contiguous(t);
    if (r.premul != 1.0) buf.mul_(r.premul);
    Status s = comm_->all_reduce(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(buf.numel()), r.type, r.op);
    if (s.ok()) write_back(t, buf);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "dcomm: all_reduce_coalesced of no tensors");
  for (const auto& t : tensors) {
    check_dense(t, "all_reduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type() && t.device() == tensors[0].device(),
                "dcomm: all_reduce_coalesced takes tensors of one dtype and device");
  }
  const Reduction r = reduction_for(tensors[0], opts.reduceOp, "all_reduce_coalesced");
  std::vector<at::Tensor> ts = tensors;
  size_t bytes = 0;
  for (const auto& t : ts) bytes += nbytes(t);
  DCOMM_TORCH_ON_CUDA(ts[0], allreduce_coalesced(ts, r));
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, ts, bytes, [this, ts, r] {
    std::vector<at::Tensor> flat;
    for (const auto& t : ts) flat.push_back(t.reshape({-1}));
    at::Tensor buf = at::cat(flat);
    if (r.premul != 1.0) buf.mul_(r.premul);
    Status s = comm_->all_reduce(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(buf.numel()), r.type, r.op);
    if (!s.ok()) return s;
    int64_t at = 0;
    for (const auto& t : ts) {
      t.copy_(buf.narrow(0, at, t.numel()).view(t.sizes()));
      at += t.numel();
    }
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  check_one(tensors, "broadcast");
  at::Tensor t = tensors[0];
  const int root = static_cast<int>(opts.rootRank);
  DCOMM_TORCH_ON_CUDA(t, broadcast(t, root));
  return enqueue(c10d::OpType::BROADCAST, {t}, nbytes(t), [this, t, root] {
    at::Tensor buf = contiguous(t);
    Status s = comm_->broadcast(buf.data_ptr(), buf.data_ptr(), nbytes(buf), DataType::kUint8, root);
    if (s.ok()) write_back(t, buf);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  check_one(tensors, "reduce");
  at::Tensor t = tensors[0];
  const Reduction r = reduction_for(t, opts.reduceOp, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  DCOMM_TORCH_ON_CUDA(t, reduce(t, r, root));
  return enqueue(c10d::OpType::REDUCE, {t}, nbytes(t), [this, t, r, root] {
    at::Tensor buf = contiguous(t);
    if (r.premul != 1.0) buf.mul_(r.premul);
    Status s = comm_->reduce(buf.data_ptr(), buf.data_ptr(), static_cast<size_t>(buf.numel()), r.type, r.op, root);
    if (s.ok() && group_rank() == root) write_back(t, buf);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  check_dense(input, "all_gather_into_tensor");
  check_dense(output, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * group_size(), "dcomm: all_gather_into_tensor: the output has ",
              output.numel(), " elements, not ", group_size(), " x ", input.numel());
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "dcomm: all_gather_into_tensor: input and output dtypes differ");
  at::Tensor in = input, out = output;
  DCOMM_TORCH_ON_CUDA(in, allgather_base(out, in));
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {out}, nbytes(out), [this, in, out] {
    at::Tensor src = contiguous(in), dst = contiguous(out);
    Status s = comm_->all_gather(src.data_ptr(), dst.data_ptr(), nbytes(src), DataType::kUint8);
    if (s.ok()) write_back(out, dst);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions&) {
  check_one(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == group_size(),
              "dcomm: all_gather needs one list of ", group_size(), " output tensors");
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs = outputs[0];
  for (const auto& o : outs)
    TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                "dcomm: all_gather: every output tensor must match the input's size and dtype");
  DCOMM_TORCH_ON_CUDA(in, allgather(outs, in));
  return enqueue(c10d::OpType::ALLGATHER, outs, nbytes(in) * outs.size(), [this, in, outs] {
    at::Tensor src = contiguous(in);
    at::Tensor flat = at::empty({static_cast<int64_t>(outs.size()) * in.numel()}, in.options());
    Status s = comm_->all_gather(src.data_ptr(), flat.data_ptr(), nbytes(src), DataType::kUint8);
    if (!s.ok()) return s;
    for (size_t r = 0; r < outs.size(); ++r)
      outs[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * in.numel(), in.numel()).view(outs[r].sizes()));
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == group_size(), "dcomm: all_gather_coalesced needs ", group_size(),
              " output lists");
  for (const auto& t : inputs) {
    check_dense(t, "all_gather_coalesced");
    TORCH_CHECK(t.device().is_cpu(), "dcomm: all_gather_coalesced runs on CPU tensors");
  }
  std::vector<at::Tensor> ins = inputs, all;
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == ins.size(), "dcomm: all_gather_coalesced: each output list needs ", ins.size(),
                " tensors");
    all.insert(all.end(), list.begin(), list.end());
  }
  auto outs = outputs;
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, all, 0, [this, ins, outs] {
    std::vector<at::Tensor> flat;
    for (const auto& t : ins) flat.push_back(t.reshape({-1}).view(at::kByte));
    at::Tensor mine = at::cat(flat);
    at::Tensor gathered = at::empty({mine.numel() * group_size()}, mine.options());
    Status s =
        comm_->all_gather(mine.data_ptr(), gathered.data_ptr(), static_cast<size_t>(mine.numel()), DataType::kUint8);
    if (!s.ok()) return s;
    for (int r = 0; r < group_size(); ++r) {
      int64_t at = static_cast<int64_t>(r) * mine.numel();
      for (size_t i = 0; i < ins.size(); ++i) {
        const int64_t n = static_cast<int64_t>(nbytes(ins[i]));
        outs[static_cast<size_t>(r)][i].view({-1}).view(at::kByte).copy_(gathered.narrow(0, at, n));
        at += n;
      }
    }
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  check_dense(input, "reduce_scatter_tensor");
  check_dense(output, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * group_size(), "dcomm: reduce_scatter_tensor: the input has ",
              input.numel(), " elements, not ", group_size(), " x ", output.numel());
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "dcomm: reduce_scatter_tensor: input and output dtypes differ");
  const Reduction r = reduction_for(input, opts.reduceOp, "reduce_scatter_tensor");
  at::Tensor in = input, out = output;
  DCOMM_TORCH_ON_CUDA(in, reduce_scatter_base(out, in, r));
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, nbytes(in), [this, in, out, r] {
    at::Tensor src = r.premul != 1.0 ? in.mul(r.premul).contiguous() : contiguous(in), dst = contiguous(out);
    Status s = comm_->reduce_scatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()), r.type, r.op);
    if (s.ok()) write_back(out, dst);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  check_one(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == group_size(),
              "dcomm: reduce_scatter needs one list of ", group_size(), " input tensors");
  at::Tensor out = outputs[0];
  for (const auto& i : inputs[0])
    TORCH_CHECK(i.numel() == out.numel() && i.scalar_type() == out.scalar_type(),
                "dcomm: reduce_scatter: every input tensor must match the output's size and dtype");
  const Reduction r = reduction_for(out, opts.reduceOp, "reduce_scatter");
  std::vector<at::Tensor> ins = inputs[0];
  DCOMM_TORCH_ON_CUDA(out, reduce_scatter(out, ins, r));
  return enqueue(c10d::OpType::REDUCE_SCATTER, {out}, nbytes(out) * ins.size(), [this, ins, out, r] {
    std::vector<at::Tensor> flat;
    for (const auto& t : ins) flat.push_back(t.reshape({-1}));
    at::Tensor src = at::cat(flat);
    if (r.premul != 1.0) src.mul_(r.premul);
    at::Tensor dst = contiguous(out);
    Status s = comm_->reduce_scatter(src.data_ptr(), dst.data_ptr(), static_cast<size_t>(dst.numel()), r.type, r.op);
    if (s.ok()) write_back(out, dst);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  check_one(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank), me = group_rank(), n = group_size();
  at::Tensor in = inputs[0];
  std::vector<at::Tensor> outs;
  if (me == root) outs = root_list(outputs, n, in, "gather", "output");
  DCOMM_TORCH_ON_CUDA(in, gather(outs, in, root));
  return enqueue(c10d::OpType::GATHER, outs, nbytes(in) * static_cast<size_t>(n), [this, in, outs, root] {
    std::vector<at::Tensor> src{contiguous(in)}, bufs;
    for (const auto& o : outs) bufs.push_back(contiguous(o));
    Status s =
        comm_->exchange(dcomm::Exchange::kGather, root, tensor_blocks(src), tensor_blocks(bufs), DataType::kUint8);
    if (s.ok())
      for (size_t r = 0; r < bufs.size(); ++r) write_back(outs[r], bufs[r]);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  check_one(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank), me = group_rank(), n = group_size();
  at::Tensor out = outputs[0];
  std::vector<at::Tensor> ins;
  if (me == root) ins = root_list(inputs, n, out, "scatter", "input");
  DCOMM_TORCH_ON_CUDA(out, scatter(out, ins, root));
  return enqueue(c10d::OpType::SCATTER, {out}, nbytes(out) * static_cast<size_t>(n), [this, ins, out, root] {
    std::vector<at::Tensor> srcs, dst{contiguous(out)};
    for (const auto& t : ins) srcs.push_back(contiguous(t));
    Status s =
        comm_->exchange(dcomm::Exchange::kScatter, root, tensor_blocks(srcs), tensor_blocks(dst), DataType::kUint8);
    if (s.ok()) write_back(out, dst[0]);
    return s;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& output_splits,
                                                                std::vector<int64_t>& input_splits,
                                                                const c10d::AllToAllOptions&) {
  check_dense(input, "all_to_all_single");
  check_dense(output, "all_to_all_single");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "dcomm: all_to_all_single: input and output dtypes differ");
  const int n = group_size();
  // Splits count rows (the first dimension); none given: equal parts.
  auto byte_splits = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const int64_t rows = t.dim() ? t.size(0) : 1;
    const size_t row_bytes = rows ? nbytes(t) / static_cast<size_t>(rows) : 0;
    std::vector<int64_t> parts = splits;
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "dcomm: all_to_all_single: ", which, " has ", rows, " rows, not a multiple of ", n);
      parts.assign(static_cast<size_t>(n), rows / n);
    }
    TORCH_CHECK(static_cast<int>(parts.size()) == n, "dcomm: all_to_all_single: ", which, " splits need ", n,
                " entries");
    ByteSplits out;
    size_t at = 0;
    int64_t total = 0;
    for (int64_t s : parts) {
      TORCH_CHECK(s >= 0, "dcomm: all_to_all_single: a negative split");
      out.counts.push_back(static_cast<size_t>(s) * row_bytes);
      out.displs.push_back(at);
      at += static_cast<size_t>(s) * row_bytes;
      total += s;
    }
    TORCH_CHECK(total == rows, "dcomm: all_to_all_single: ", which, " splits add up to ", total, " rows, not ", rows);
    return out;
  };
  const ByteSplits in_bytes = byte_splits(input, input_splits, "the input");
  const ByteSplits out_bytes = byte_splits(output, output_splits, "the output");
  at::Tensor in = input, out = output;
  DCOMM_TORCH_ON_CUDA(in, alltoall(out, in, out_bytes, in_bytes));
  return enqueue(c10d::OpType::ALLTOALL_BASE, {out}, nbytes(in), [this, in, out, in_bytes, out_bytes] {
    at::Tensor src = contiguous(in), dst = contiguous(out);
    Status st = comm_->all_to_all_v(src.data_ptr(), in_bytes.counts, in_bytes.displs, dst.data_ptr(), out_bytes.counts,
                                    out_bytes.displs, DataType::kUint8);
    if (st.ok()) write_back(out, dst);
    return st;
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDcomm::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  const int n = group_size();
  TORCH_CHECK(static_cast<int>(outputs.size()) == n && static_cast<int>(inputs.size()) == n, "dcomm: all_to_all needs ",
              n, " input and ", n, " output tensors");
  for (int r = 0; r < n; ++r) {
    check_dense(inputs[static_cast<size_t>(r)], "all_to_all");
    check_dense(outputs[static_cast<size_t>(r)], "all_to_all");
    TORCH_CHECK(inputs[static_cast<size_t>(r)].device().is_cpu(),
                "dcomm: all_to_all (a list of tensors) runs on CPU tensors");
  }
  std::vector<at::Tensor> ins = inputs, outs = outputs;
  size_t bytes = 0;
  for (const auto& t : ins) bytes += nbytes(t);
  return enqueue(c10d::OpType::ALLTOALL, outs, bytes, [this, ins, outs] {
    std::vector<at::Tensor> srcs, dsts;
    for (const auto& t : ins) srcs.push_back(contiguous(t));
    for (const auto& t : outs) dsts.push_back(contiguous(t));
    Status s =
        comm_->exchange(dcomm::Exchange::kAllToAll, 0, tensor_blocks(srcs), tensor_blocks(dsts), DataType::kUint8);
    if (s.ok())
      for (size_t r = 0; r < dsts.size(); ++r) write_back(outs[r], dsts[r]);
    return s;
  });
}

}  // namespace dcomm_torch
