#pragma once
// Parameters live in one contiguous float32 buffer described by a layout table (name, shape,
// offset), llm.c style. Gradients and optimizer moments reuse the same layout, so clipping, AdamW,
// checkpointing and all-reduce are single loops over one buffer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace retnet {

struct ParamEntry {
  std::string name;            // torchscale's state_dict name, e.g. "layers.0.ffn.fc1.weight"
  std::vector<int64_t> shape;  // row-major
  size_t offset = 0;           // in floats, from the start of the buffer
  size_t numel = 0;
  bool weight_decay = false;   // whether AdamW decays it (set by the model's layout)
};

class ParamLayout {
 public:
  // Appends a tensor; returns its index. Names must be unique.
  size_t add(const std::string& name, std::vector<int64_t> shape, bool weight_decay = false);
  const ParamEntry& operator[](size_t i) const { return entries_[i]; }
  // nullptr when absent.
  const ParamEntry* find(const std::string& name) const;
  const ParamEntry& at(const std::string& name) const;  // throws Error when absent
  size_t size() const { return entries_.size(); }
  size_t total_floats() const { return total_; }
  const std::vector<ParamEntry>& entries() const { return entries_; }

 private:
  std::vector<ParamEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  size_t total_ = 0;
};

// The storage: owned (zero-initialised, 64-byte aligned) or borrowed from a memory-mapped file,
// in which case `keep_alive` holds the mapping.
class ParamBuffer {
 public:
  ParamBuffer() = default;
  explicit ParamBuffer(const ParamLayout& layout);  // owned, zeros
  static ParamBuffer borrow(const ParamLayout& layout, float* data, std::shared_ptr<void> keep_alive);

  const ParamLayout& layout() const { return layout_; }
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return layout_.total_floats(); }
  bool owns_memory() const { return owned_ != nullptr; }
  // Whether no other ParamBuffer shares this storage (copies share it).
  bool sole_holder() const {
    return owned_ ? owned_.use_count() == 1 : (!keep_alive_ || keep_alive_.use_count() == 1);
  }
  // Hands the whole pages inside floats [first, first + count) back to the system (madvise
  // DONTNEED): their values become zeros (owned) or the file's again (mapped) and stop counting in
  // the resident set. For weights that another copy replaces.
  void release_pages(size_t first, size_t count);
  float* tensor(const std::string& name) { return data_ + layout_.at(name).offset; }
  const float* tensor(const std::string& name) const { return data_ + layout_.at(name).offset; }
  float* tensor(size_t index) { return data_ + layout_[index].offset; }
  const float* tensor(size_t index) const { return data_ + layout_[index].offset; }

 private:
  ParamLayout layout_;
  std::shared_ptr<float> owned_;
  std::shared_ptr<void> keep_alive_;
  float* data_ = nullptr;
};

}  // namespace retnet
