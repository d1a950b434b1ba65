// The checks of the NCCL tests that run without doctest (they link only dcomm's libnccl.so.2,
// as a program built against NCCL would): CHECK counts a failure and prints why, and the test
// exits non-zero when any failed.
#pragma once

#include <chrono>
#include <cstdio>

inline int failures = 0;
#define CHECK(cond, ...)                         \
  do {                                           \
    if (!(cond)) {                               \
      ++failures;                                \
      std::printf("FAIL (line %d): ", __LINE__); \
      std::printf(__VA_ARGS__);                  \
      std::printf("\n");                         \
      std::fflush(stdout);                       \
    }                                            \
  } while (0)

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
