// What a process holds that a lifecycle must give back: descriptors, threads, this process's
// shared-memory files, pinned memory (verbs registrations) and resident memory. The process tests'
// worker (communicators made and destroyed) and dcomm-recovery --cycles (ranks killed, shrunk
// past and replaced) compare a snapshot after warm-up with one at the end.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include <dcomm/transport/shm.hpp>

namespace dcomm_test {

struct Footprint {
  int fds = 0, threads = 0, shm_files = 0;
  long pinned_kb = 0, rss_kb = 0;

  static int count(const char* dir, const std::string& prefix = "") {
    int k = 0;
    if (DIR* d = opendir(dir)) {
      while (dirent* e = readdir(d)) k += e->d_name[0] != '.' && std::string(e->d_name).rfind(prefix, 0) == 0;
      closedir(d);
    }
    return k;
  }
  static long status_kb(const char* field) {  // a "VmXxx:" line of /proc/self/status
    std::ifstream f("/proc/self/status");
    const std::string want = std::string(field) + ":";
    for (std::string line; std::getline(f, line);)
      if (line.rfind(want, 0) == 0) return std::atol(line.c_str() + want.size());
    return 0;
  }
  static Footprint now() {
    const std::string mine = "dcomm-" + dcomm::detail::pid_namespace() + "-" + std::to_string(getpid()) + "-";
    return {count("/proc/self/fd"), count("/proc/self/task"), count("/dev/shm", mine), status_kb("VmPin"),
            status_kb("VmRSS")};
  }
  // More descriptors, threads, files or pinned memory than `before` (resident memory is the
  // caller's to judge: allocators keep some).
  bool holds_more_than(const Footprint& before) const {
    return fds > before.fds || threads > before.threads || shm_files > before.shm_files || pinned_kb > before.pinned_kb;
  }
  // Now, or up to 2 s later while it still holds more than `before`: a descriptor or thread
  // still closing when the snapshot was taken (a loaded machine) is no leak.
  static Footprint settled(const Footprint& before) {
    Footprint f = now();
    for (int k = 0; k < 40 && f.holds_more_than(before); ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      f = now();
    }
    return f;
  }
  std::string describe(const Footprint& before) const {
    char text[256];
    std::snprintf(text, sizeof text,
                  "descriptors %d -> %d, threads %d -> %d, shared-memory files %d -> %d, pinned kB %ld -> %ld, "
                  "RSS kB %ld -> %ld",
                  before.fds, fds, before.threads, threads, before.shm_files, shm_files, before.pinned_kb, pinned_kb,
                  before.rss_kb, rss_kb);
    return text;
  }
};

}  // namespace dcomm_test
