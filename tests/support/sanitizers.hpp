// Whether this test binary runs under a sanitizer (tests/scripts/sanitize.sh). AddressSanitizer
// keeps freed memory in quarantine and maps shadow memory, so a process's resident memory says
// nothing about what the code holds: the checks of resident memory are left out under it.
#pragma once

namespace dcomm_test {
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAsan = true;
#else
inline constexpr bool kUnderAsan = false;
#endif
#else
inline constexpr bool kUnderAsan = false;
#endif
}  // namespace dcomm_test
