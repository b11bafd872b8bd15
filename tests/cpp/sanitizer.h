#pragma once

namespace retnet::test {

// Whether this build runs under AddressSanitizer (gcc and clang spell it differently). Its
// allocator adds redzones and holds freed memory in a quarantine (up to 256 MiB), so memory
// figures and child-process run times need wider limits there.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

}  // namespace retnet::test
