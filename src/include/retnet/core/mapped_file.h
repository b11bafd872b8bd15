#pragma once
// A whole file mapped read-only into memory; whatever points into it holds the shared_ptr.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace retnet {

struct MappedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
};

// Throws Error naming the file when it cannot be opened or mapped, or is not a regular file;
// `what` describes it in errors ("token cache"). An empty file maps to size 0.
std::shared_ptr<const MappedFile> map_file_readonly(const std::string& path,
                                                    const std::string& what = "");

// Hands the whole pages of [data, data + bytes), a range of a mapped file already read, back to
// the system: they leave the resident set (the page cache keeps them; reading them again maps
// them back), so that a loader converting a file does not hold the file beside its copy.
void release_mapped(const uint8_t* data, size_t bytes);

}  // namespace retnet
