#pragma once
// safetensors files: 8-byte little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets} (plus an optional "__metadata__" string map), then the raw data.
// Files are memory-mapped on open and every header field is validated before any data is touched.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace retnet {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", ...
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping
  size_t nbytes = 0;
  size_t data_offset = 0;  // from the start of the data section
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the file; throws Error naming the file and the problem.
  static SafetensorsFile open(const std::string& path);
  // The same validation over a whole file image held in memory (fuzzing, tests); `label` stands
  // for the path in errors.
  static SafetensorsFile from_bytes(const std::string& bytes, const std::string& label);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Sorted by data offset.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* find(const std::string& name) const;
  // The mapping's base of the data section, kept alive by the returned handle.
  uint8_t* data_section() const { return data_section_; }
  std::shared_ptr<void> mapping() const { return mapping_; }

 private:
  static SafetensorsFile from_descriptor(int fd, const std::string& path);  // closes fd
  void parse(uint8_t* image, size_t size);
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensor> tensors_;
  std::shared_ptr<void> mapping_;
  uint8_t* data_section_ = nullptr;
};

// Converts a tensor of any supported floating dtype (F32, F16, BF16, F64) to float32.
void copy_as_float32(const SafetensorsTensor& t, float* out);

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  const uint16_t* bf16 = nullptr;  // when set, the tensor is written as BF16 from these bits
  bool as_bf16 = false;            // write `data` as BF16 (rounded to nearest even while writing)
  const uint8_t* u8 = nullptr;     // when set, the tensor is written as U8 bytes (quantised blocks)
};

// Writes float32 (or BF16) tensors in the given order, contiguously, with the data section 64-byte aligned.
// Atomic: a temporary file in the same directory, fsync, rename. Streamed: no copy of the data.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata);

// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync of the directory).
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace retnet
