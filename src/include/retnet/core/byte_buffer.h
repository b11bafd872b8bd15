#pragma once
// Writing a binary file's bytes into a string before it is written atomically: raw values in
// the machine's byte order (the readers check it), and 64-bit checksums as hex text.
#include <cstddef>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace retnet {

template <typename T>
void append_raw(std::string& out, const T* data, size_t n) {
  if (n > 0) out.append(reinterpret_cast<const char*>(data), n * sizeof(T));
}

inline std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace retnet
