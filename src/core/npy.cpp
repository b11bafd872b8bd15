#include "retnet/core/npy.h"

#include <cstring>
#include <regex>

#include "retnet/core/error.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"

namespace retnet {

void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  size_t n = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ",";
    n *= static_cast<size_t>(d);
  }
  if (shape.size() > 1) dims.pop_back();  // "(3,)" for 1-d, "(3,4)" otherwise
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + header length (2) + header, padded with spaces to 64 bytes, '\n'-ended.
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string bytes = "\x93NUMPY";
  bytes.push_back(1);
  bytes.push_back(0);
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes += header;
  bytes.append(reinterpret_cast<const char*>(data), n * sizeof(float));
  write_file_atomically(path, bytes);
}

NpyArray read_npy(const std::string& path) {
  const std::string bytes = read_file(path);
  RETNET_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0,
               "'{}' is not a .npy file", path);
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, header_start;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    header_start = 10;
  } else {
    RETNET_CHECK(bytes.size() >= 12, "'{}' is truncated", path);
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = header_len << 8 | static_cast<unsigned char>(bytes[8 + i]);
    header_start = 12;
  }
  RETNET_CHECK(header_start + header_len <= bytes.size(), "'{}' is truncated", path);
  std::string header = bytes.substr(header_start, header_len);
  RETNET_CHECK(header.find("'descr': '<f4'") != std::string::npos,
               "'{}': only little-endian float32 arrays are supported (header {})", path, header);
  RETNET_CHECK(header.find("'fortran_order': False") != std::string::npos,
               "'{}': Fortran-order arrays are not supported", path);
  std::smatch m;
  RETNET_CHECK(std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)")),
               "'{}': no shape in header {}", path, header);
  NpyArray a;
  std::string dims = m[1];
  std::regex num("[0-9]+");
  size_t n = 1;
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator();
       ++it) {
    a.shape.push_back(std::stoll(it->str()));
    n *= static_cast<size_t>(a.shape.back());
  }
  size_t data_start = header_start + header_len;
  RETNET_CHECK(bytes.size() - data_start == n * sizeof(float),
               "'{}' holds {} data bytes, its shape needs {}", path, bytes.size() - data_start,
               n * sizeof(float));
  a.data.resize(n);
  std::memcpy(a.data.data(), bytes.data() + data_start, n * sizeof(float));
  return a;
}

}  // namespace retnet
