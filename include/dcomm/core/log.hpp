// Logging with levels and subsystems, configured like NCCL_DEBUG:
//   DCOMM_DEBUG=NONE|WARN|INFO|TRACE      (default WARN)
//   DCOMM_DEBUG_SUBSYS=INIT,COLL,...      (default ALL; a leading ^ excludes the listed ones)
//   DCOMM_DEBUG_FILE=path                 (%h host, %p pid; default stderr)
// Lines read "host:pid:tid [rank] dcomm LEVEL SUBSYS message". Logging is process-wide.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <sys/syscall.h>

#include "dcomm/core/config.hpp"
#include "dcomm/core/env.hpp"
#include "dcomm/core/status.hpp"

DCOMM_NAMESPACE_BEGIN

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum LogSubsys : unsigned {
  kSubsysInit = 1u << 0,
  kSubsysBootstrap = 1u << 1,
  kSubsysTransport = 1u << 2,
  kSubsysColl = 1u << 3,
  kSubsysP2P = 1u << 4,
  kSubsysProxy = 1u << 5,
  kSubsysTuning = 1u << 6,
  kSubsysAll = ~0u,
};

class Logger {
 public:
  static Logger& instance() {
    static Logger logger;
    return logger;
  }
  bool enabled(LogLevel level, unsigned subsys) const {
    return static_cast<int>(level) <= static_cast<int>(level_) && (subsys & mask_);
  }
  template <class... Args>
  void log(LogLevel level, unsigned subsys, int rank, const Args&... args) {
    if (!enabled(level, subsys)) return;
    std::string msg = detail::cat(args...);
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(out_, "%s:%d:%ld [%d] dcomm %s %s %s\n", host_, static_cast<int>(getpid()),
                 static_cast<long>(syscall(SYS_gettid)), rank, level_name(level), subsys_name(subsys), msg.c_str());
    std::fflush(out_);
  }

 private:
  Logger() {
    gethostname(host_, sizeof host_ - 1);
    std::string lv = env_or("DCOMM_DEBUG", "WARN");
    if (lv == "NONE") level_ = LogLevel::kNone;
    else if (lv == "INFO") level_ = LogLevel::kInfo;
    else if (lv == "TRACE") level_ = LogLevel::kTrace;
    else level_ = LogLevel::kWarn;
    mask_ = parse_subsys(env_or("DCOMM_DEBUG_SUBSYS", "ALL"));
    std::string file = env_or("DCOMM_DEBUG_FILE");
    if (!file.empty()) {
      std::string path;
      for (size_t i = 0; i < file.size(); ++i) {
        if (file[i] == '%' && i + 1 < file.size() && file[i + 1] == 'h') path += host_, ++i;
        else if (file[i] == '%' && i + 1 < file.size() && file[i + 1] == 'p') path += std::to_string(getpid()), ++i;
        else path += file[i];
      }
      if (FILE* f = std::fopen(path.c_str(), "a")) out_ = f;
    }
  }
  static unsigned parse_subsys(const std::string& spec) {
    bool invert = !spec.empty() && spec[0] == '^';
    unsigned mask = 0;
    size_t pos = invert ? 1 : 0;
    while (pos <= spec.size()) {
      size_t comma = spec.find(',', pos);
      std::string name = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      for (unsigned bit = 1; bit != 0 && bit <= kSubsysTuning; bit <<= 1)
        if (name == subsys_name(bit)) mask |= bit;
      if (name == "ALL") mask = kSubsysAll;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    return invert ? ~mask : mask;
  }
  static const char* level_name(LogLevel l) {
    switch (l) {
      case LogLevel::kWarn: return "WARN";
      case LogLevel::kInfo: return "INFO";
      case LogLevel::kTrace: return "TRACE";
      default: return "";
    }
  }
  static const char* subsys_name(unsigned s) {
    switch (s) {
      case kSubsysInit: return "INIT";
      case kSubsysBootstrap: return "BOOTSTRAP";
      case kSubsysTransport: return "TRANSPORT";
      case kSubsysColl: return "COLL";
      case kSubsysP2P: return "P2P";
      case kSubsysProxy: return "PROXY";
      case kSubsysTuning: return "TUNING";
      default: return "ALL";
    }
  }

  char host_[256] = {};
  LogLevel level_ = LogLevel::kWarn;
  unsigned mask_ = kSubsysAll;
  FILE* out_ = stderr;
  std::mutex mu_;
};

DCOMM_NAMESPACE_END

// Formats its arguments only when the level and subsystem are enabled.
#define DCOMM_LOG(level, subsys, rank, ...)                                              \
  do {                                                                                   \
    auto& dcomm_logger_ = ::dcomm::Logger::instance();                                   \
    if (dcomm_logger_.enabled(::dcomm::LogLevel::level, ::dcomm::subsys))                \
      dcomm_logger_.log(::dcomm::LogLevel::level, ::dcomm::subsys, (rank), __VA_ARGS__); \
  } while (0)
