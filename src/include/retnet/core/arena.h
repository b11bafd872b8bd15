#pragma once
// Activation arena: one aligned block sized up front from (B, T, config); a forward pass takes its
// buffers from it with a bump pointer and the caller resets it between passes. No allocation
// happens inside a pass, and running out is a programming error reported with the sizes involved.
#include <cstddef>
#include <memory>

namespace retnet {

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t floats) { reserve(floats); }
  // Grows the block (dropping its contents) when it holds fewer than `floats`.
  void reserve(size_t floats);
  // `n` floats, 64-byte aligned, uninitialised.
  float* alloc(size_t n);
  void reset() { used_ = 0; }
  // Frees everything allocated after `mark` (a value of used()).
  void rewind(size_t mark) { used_ = mark < used_ ? mark : used_; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  size_t high_water() const { return high_water_; }
  // Floats that alloc(n) consumes, padding included: for sizing an arena ahead of time.
  static size_t footprint(size_t n) { return (n + 15) / 16 * 16; }

 private:
  std::unique_ptr<float, void (*)(void*)> block_{nullptr, nullptr};
  size_t capacity_ = 0, used_ = 0, high_water_ = 0;
};

}  // namespace retnet
