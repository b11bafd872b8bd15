#include "retnet/core/param_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "retnet/core/error.h"

namespace retnet {

size_t ParamLayout::add(const std::string& name, std::vector<int64_t> shape, bool weight_decay) {
  RETNET_CHECK(!index_.count(name), "parameter '{}' is defined twice", name);
  ParamEntry e;
  e.name = name;
  e.weight_decay = weight_decay;
  e.numel = 1;
  for (int64_t d : shape) {
    RETNET_CHECK(d > 0, "parameter '{}' has a non-positive dimension {}", name, d);
    e.numel *= static_cast<size_t>(d);
  }
  e.shape = std::move(shape);
  e.offset = total_;
  total_ += e.numel;
  index_[name] = entries_.size();
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

const ParamEntry* ParamLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const ParamEntry& ParamLayout::at(const std::string& name) const {
  const ParamEntry* e = find(name);
  RETNET_CHECK(e != nullptr, "no parameter named '{}'", name);
  return *e;
}

ParamBuffer::ParamBuffer(const ParamLayout& layout) : layout_(layout) {
  size_t bytes = (std::max<size_t>(layout.total_floats(), 1) * sizeof(float) + 63) / 64 * 64;
  // Large buffers are anonymous mappings: zeros that take no memory until written, so a loader
  // that fills and releases tensors one at a time never has the whole buffer resident.
  if (bytes >= (size_t{1} << 20)) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    RETNET_CHECK(m != MAP_FAILED, "out of memory mapping {} bytes of parameters", bytes);
    owned_ =
        std::shared_ptr<float>(static_cast<float*>(m), [bytes](float* q) { munmap(q, bytes); });
    data_ = owned_.get();
    return;
  }
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  RETNET_CHECK(p != nullptr, "out of memory allocating {} bytes of parameters", bytes);
  std::memset(p, 0, bytes);
  owned_ = std::shared_ptr<float>(p, [](float* q) { std::free(q); });
  data_ = p;
}

ParamBuffer ParamBuffer::borrow(const ParamLayout& layout, float* data,
                                std::shared_ptr<void> keep_alive) {
  ParamBuffer b;
  b.layout_ = layout;
  b.data_ = data;
  b.keep_alive_ = std::move(keep_alive);
  return b;
}

void ParamBuffer::release_pages(size_t first, size_t count) {
  RETNET_CHECK(first + count <= size(), "release_pages: floats [{}, {}) outside the buffer of {}",
               first, first + count, size());
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_ + first);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data_ + first + count);
  const uintptr_t lo = (begin + page - 1) / page * page, hi = end / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace retnet
