// Shared-memory transport between processes on one host. Each rank creates the FIFO it
// receives on as a file in DCOMM_SHM_DIR (default /dev/shm), reserves its pages with
// posix_fallocate (so a full /dev/shm is an error now, not a SIGBUS later), maps it, and
// publishes the file's name in the store; the sender maps it and unlinks the name, so nothing
// is left behind even if both later crash.
//
// Names are unique to the process and the moment (dcomm-<pid namespace>-<pid>-<what>-<random>),
// so jobs on one host never collide, and a file a killed process left behind never blocks a
// later job; the first FIFO a process creates also sweeps away the files of dcomm processes of
// its pid namespace that no longer run.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "dcomm/core/bytes.hpp"
#include "dcomm/core/config.hpp"
#include "dcomm/core/log.hpp"
#include "dcomm/transport/transport.hpp"

DCOMM_NAMESPACE_BEGIN

namespace detail {
class ShmMapping {
 public:
  ShmMapping() = default;
  ShmMapping(void* p, size_t bytes, std::string path) : p_(p), bytes_(bytes), path_(std::move(path)) {}
  ShmMapping(ShmMapping&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(o.bytes_), path_(std::move(o.path_)) {}
  ShmMapping& operator=(ShmMapping&&) = delete;
  ~ShmMapping() {
    if (p_) munmap(p_, bytes_);
    if (!path_.empty()) ::unlink(path_.c_str());  // in case the peer never mapped it
  }
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  std::string path_;  // set on the creating side only
};

inline std::string shm_full_message(const std::string& dir, size_t need, const char* what = "one shared-memory FIFO") {
  struct statvfs st {};
  std::string free_text = "unknown";
  if (statvfs(dir.c_str(), &st) == 0) free_text = detail::cat(st.f_bavail * st.f_frsize / (size_t{1} << 20), " MiB");
  return cat(dir, " is too small: ", need / (size_t{1} << 20), " MiB needed for ", what, ", ", free_text,
             " free. In Docker, run with --shm-size=1g (or --ipc=host); otherwise lower DCOMM_SLOT_BYTES or "
             "DCOMM_SLOTS, point DCOMM_SHM_DIR at a larger tmpfs, or use DCOMM_TRANSPORT=tcp");
}

// This process's pid namespace (the inode in /proc/self/ns/pid), so that a sweep judges only
// names whose pids it can see.
inline std::string pid_namespace() {
  char buf[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  std::string digits;
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] >= '0' && buf[i] <= '9') digits += buf[i];
  return digits.empty() ? "0" : digits;
}

// A name no other process, job or earlier run uses: dcomm-<pid namespace>-<pid>-<what>-<random>.
inline std::string unique_shm_name(const std::string& what) {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return cat("dcomm-", pid_namespace(), "-", getpid(), "-", what, "-", to_hex(&r, sizeof r));
}

// Unlinks what dcomm processes of this pid namespace left in `dir` when they died before
// cleaning up (killed during start-up, say): names of the form above whose pid no longer
// runs. Once per directory per process.
inline void sweep_dead_shm(const std::string& dir) {
  static std::mutex mu;
  static std::set<std::string> swept;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!swept.insert(dir).second) return;
  }
  const std::string prefix = cat("dcomm-", pid_namespace(), "-");
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (pid <= 0 || *end != '-') continue;
    const bool dead = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
    if (!dead) continue;
    if (::unlink(cat(dir, "/", name).c_str()) == 0) ++removed;
  }
  closedir(d);
  if (removed)
    DCOMM_LOG(kInfo, kSubsysTransport, -1, "removed ", removed,
              " shared-memory file(s) that exited dcomm processes left in ", dir);
}

// A shared-memory region of `bytes` as a new file at `path` (in `dir`, DCOMM_SHM_DIR): its pages
// reserved with posix_fallocate, so a full tmpfs is an error now and not a SIGBUS later, and
// mapped. The mapping unlinks the file when it goes, in case no peer ever opened it.
inline Result<ShmMapping> create_shm_region(const std::string& path, size_t bytes, const std::string& dir,
                                            const char* what) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status(cat("cannot create shared-memory file ", path).c_str());
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    if (rc == ENOSPC) return make_error(ErrorCode::kOutOfResources, shm_full_message(dir, bytes, what));
    return errno_status(cat("posix_fallocate on ", path).c_str(), rc);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    ::unlink(path.c_str());
    return errno_status(cat("mmap of ", what).c_str());
  }
  return ShmMapping(p, bytes, path);
}

// Maps the region another rank created at `path`, which must be `bytes` long (`mismatch` says
// what to check when it is not). unlink_now: this is its only reader, so the name goes once
// both ends have it mapped; otherwise its creator removes it.
inline Result<ShmMapping> open_shm_region(const std::string& path, size_t bytes, bool unlink_now, const char* what,
                                          const char* mismatch) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errno_status(cat("cannot open the peer's shared-memory file ", path).c_str());
  struct stat st {};
  fstat(fd, &st);
  if (static_cast<size_t>(st.st_size) != bytes) {
    ::close(fd);
    return invalid_argument(what, " ", path, " is ", st.st_size, " bytes, expected ", bytes, ": ", mismatch);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  ::close(fd);
  if (unlink_now) ::unlink(path.c_str());
  if (p == MAP_FAILED) return errno_status(cat("mmap of the peer's ", what).c_str());
  return ShmMapping(p, bytes, {});
}

inline Result<ShmMapping> create_shm_fifo(const std::string& path, const Config& c) {
  auto m = create_shm_region(path, local_fifo_bytes(c), c.shm_dir, "one shared-memory FIFO");
  if (m.ok())
    FifoRef::initialize(m->get(), c.slot_bytes, static_cast<size_t>(c.slots), static_cast<size_t>(c.small_slots));
  return m;
}

inline Result<ShmMapping> open_shm_fifo(const std::string& path, const Config& c) {
  return open_shm_region(path, local_fifo_bytes(c), /*unlink_now=*/true, "shared-memory FIFO",
                         "do all ranks set the same DCOMM_SLOT_BYTES, DCOMM_SLOTS and DCOMM_SMALL_SLOTS?");
}
}  // namespace detail

class ShmConnection final : public Connection {
 public:
  ShmConnection(detail::ShmMapping send, detail::ShmMapping recv) : send_(std::move(send)), recv_(std::move(recv)) {}
  FifoRef send_fifo() const override { return FifoRef(send_.get()); }
  FifoRef recv_fifo() const override { return FifoRef(recv_.get()); }
  const char* kind() const override { return "shm"; }
  size_t staging_bytes() const override { return recv_.bytes(); }

 private:
  detail::ShmMapping send_;
  detail::ShmMapping recv_;
};

class ShmTransport final : public Transport {
 public:
  const char* name() const override { return "shm"; }
  Status prepare(const ConnectContext& ctx) override {
    const Config& c = *ctx.config;
    int me = ctx.rank, peer = ctx.peer->rank;
    if (prepared_.count(peer)) return {};
    detail::sweep_dead_shm(c.shm_dir);
    std::string path = detail::cat(c.shm_dir, "/", detail::unique_shm_name(detail::cat(peer, "to", me)));
    auto recv = detail::create_shm_fifo(path, c);
    if (!recv.ok()) return recv.status();
    prepared_.emplace(peer, std::move(*recv));
    return ctx.store->set(detail::cat(ctx.key_prefix, "/shm/", peer, "to", me), path);
  }
  Result<std::unique_ptr<Connection>> connect(const ConnectContext& ctx) override {
    int me = ctx.rank, peer = ctx.peer->rank;
    DCOMM_RETURN_IF_ERROR(prepare(ctx));
    auto theirs = ctx.store->get(detail::cat(ctx.key_prefix, "/shm/", me, "to", peer));
    if (!theirs.ok()) return theirs.status().with_context(detail::cat("connecting to ", ctx.peer->describe()));
    auto send = detail::open_shm_fifo(*theirs, *ctx.config);
    if (!send.ok()) return send.status();
    auto it = prepared_.find(peer);
    auto conn = std::unique_ptr<Connection>(new ShmConnection(std::move(*send), std::move(it->second)));
    prepared_.erase(it);
    return conn;
  }

 private:
  std::map<int, detail::ShmMapping> prepared_;  // receive FIFOs created, not yet connected
};

DCOMM_NAMESPACE_END
