#pragma once
// NumPy .npy files (format 1.0, little-endian float32, C order): how logits leave the engine for
// comparison with other frameworks, and how tests read them back.
#include <cstdint>
#include <string>
#include <vector>

namespace retnet {

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape);

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
// Reads a float32 ('<f4'), C-order file; throws Error otherwise.
NpyArray read_npy(const std::string& path);

}  // namespace retnet
