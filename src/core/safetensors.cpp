#include "retnet/core/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"
#include "retnet/core/half.h"
#include "retnet/core/huge_pages.h"
#include "retnet/core/json_parse.h"

namespace retnet {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

size_t dtype_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}


struct Mapping {
  void* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base && base != MAP_FAILED) munmap(base, size);
  }
};

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  return from_descriptor(open_regular_file(path, "model file"), path);
}

SafetensorsFile SafetensorsFile::from_bytes(const std::string& bytes, const std::string& label) {
  // A memory file mapped like a disk file: release_mapped's page drops read it back, as from disk.
  const int fd = memfd_create("safetensors", MFD_CLOEXEC);
  RETNET_CHECK(fd >= 0, "cannot create a memory file for '{}': {}", label, std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("cannot write a memory file for '{}': {}", label, std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  return from_descriptor(fd, label);
}

SafetensorsFile SafetensorsFile::from_descriptor(int fd, const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot stat model file '{}': {}", path, std::strerror(err)));
  }
  size_t file_size = static_cast<size_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw Error(fmt::format("'{}' is not a safetensors file: {} bytes, shorter than the 8-byte "
                            "header length",
                            path, file_size));
  }
  auto mapping = std::make_shared<Mapping>();
  // Private, writable mapping: parameters can point into it; a write copies the page, never the file.
  mapping->base = mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  mapping->size = file_size;
  ::close(fd);
  RETNET_CHECK(mapping->base != MAP_FAILED, "cannot map '{}': {}", path, std::strerror(map_err));
  // Weights used where they lie are streamed once per decoded token: 2 MiB pages where the page
  // cache gives them.
  advise_huge_pages(mapping->base, file_size);
  f.parse(static_cast<uint8_t*>(mapping->base), file_size);
  f.mapping_ = mapping;
  return f;
}

void SafetensorsFile::parse(uint8_t* image, size_t file_size) {
  SafetensorsFile& f = *this;
  const std::string& path = path_;
  const auto* bytes = image;

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
  RETNET_CHECK(header_len <= kMaxHeaderBytes && 8 + header_len <= file_size,
               "'{}' is truncated or not a safetensors file: header claims {} bytes but the file "
               "has {}",
               path, header_len, file_size);
  const nlohmann::json header =
      parse_json(std::string_view(reinterpret_cast<const char*>(bytes) + 8, header_len),
                 fmt::format("'{}' has a corrupt safetensors header", path));
  RETNET_CHECK(header.is_object(), "'{}': safetensors header is not a JSON object", path);
  size_t data_size = file_size - 8 - header_len;
  f.data_section_ = image + 8 + header_len;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      RETNET_CHECK(v.is_object(), "'{}': __metadata__ is not an object", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        RETNET_CHECK(m.value().is_string(), "'{}': __metadata__ value '{}' is not a string", path,
                     m.key());
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    RETNET_CHECK(v.is_object() && v.contains("dtype") && v["dtype"].is_string() &&
                     v.contains("shape") && v["shape"].is_array() && v.contains("data_offsets") &&
                     v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
                 "'{}': tensor '{}' needs dtype, shape and data_offsets [begin, end]", path, name);
    SafetensorsTensor t;
    t.name = name;
    t.dtype = v["dtype"].get<std::string>();
    size_t esize = dtype_size(t.dtype);
    RETNET_CHECK(esize != 0, "'{}': tensor '{}' has unknown dtype '{}'", path, name, t.dtype);
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      RETNET_CHECK(d.is_number_unsigned() && d.get<uint64_t>() < (1ull << 40),
                   "'{}': tensor '{}' has an invalid shape {}", path, name, v["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
      RETNET_CHECK(numel < (1ull << 44), "'{}': tensor '{}' is impossibly large", path, name);
    }
    const auto& off = v["data_offsets"];
    RETNET_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                 "'{}': tensor '{}' has invalid data_offsets {}", path, name, off.dump());
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    RETNET_CHECK(begin <= end && end <= data_size,
                 "'{}' is truncated or corrupt: tensor '{}' spans bytes [{}, {}) of a {}-byte data "
                 "section",
                 path, name, begin, end, data_size);
    RETNET_CHECK(end - begin == numel * esize,
                 "'{}': tensor '{}' has {} bytes but dtype {} and shape {} need {}", path, name,
                 end - begin, t.dtype, v["shape"].dump(), numel * esize);
    t.data = f.data_section_ + begin;
    t.nbytes = end - begin;
    t.data_offset = begin;
    f.tensors_.push_back(std::move(t));
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const auto& a, const auto& b) { return a.data_offset < b.data_offset; });
  for (size_t i = 1; i < f.tensors_.size(); ++i) {
    const auto& a = f.tensors_[i - 1];
    const auto& b = f.tensors_[i];
    RETNET_CHECK(a.data_offset + a.nbytes <= b.data_offset || a.nbytes == 0 || b.nbytes == 0,
                 "'{}' is corrupt: tensors '{}' and '{}' overlap", path, a.name, b.name);
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void copy_as_float32(const SafetensorsTensor& t, float* out) {
  int64_t n = t.numel();
  if (t.dtype == "F32") {
    std::memcpy(out, t.data, n * sizeof(float));
  } else if (t.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, t.data + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else if (t.dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = half_to_float(h);
    }
  } else if (t.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(out + i, &bits, 4);
    }
  } else {
    throw Error(fmt::format("tensor '{}' has dtype {}; expected a floating type (F32, F16, BF16, "
                            "F64)",
                            t.name, t.dtype));
  }
}

namespace {

// Writes what `produce` hands to its sink into `path` atomically: a temporary file in the same
// directory, fsync, rename, fsync of the directory. Streams: nothing is held beyond the caller's
// pieces.
void write_atomically(const std::string& path,
                      const std::function<void(const std::function<void(const char*, size_t)>&)>&
                          produce) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(getpid())))
                        .string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  RETNET_CHECK(fd >= 0, "cannot create '{}': {}", tmp, std::strerror(errno));
  auto sink = [&](const char* data, size_t size) {
    size_t done = 0;
    while (done < size) {
      ssize_t w = ::write(fd, data + done, size - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fd = -1;
        throw Error(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
      }
      done += static_cast<size_t>(w);
    }
  };
  try {
    produce(sink);
  } catch (...) {
    if (fd >= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
    }
    throw;
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot flush '{}': {}", path, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err)));
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_atomically(path, [&](const auto& sink) { sink(bytes.data(), bytes.size()); });
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  auto numel = [](const TensorToWrite& t) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    return n;
  };
  for (const auto& t : tensors) {
    const bool half = t.bf16 || t.as_bf16;
    const size_t bytes = (t.u8 ? 1 : half ? 2 : 4) * numel(t);
    header[t.name] = {{"dtype", t.u8 ? "U8" : half ? "BF16" : "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  // Pad with spaces (allowed by the format) so the data section starts 64-byte aligned.
  while ((8 + h.size()) % 64 != 0) h.push_back(' ');
  // Streamed tensor by tensor (bf16 conversions in small blocks): a multi-GB model is written
  // without a second copy of it in memory.
  write_atomically(path, [&](const auto& sink) {
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((uint64_t{h.size()} >> (8 * i)) & 0xff);
    sink(len, 8);
    sink(h.data(), h.size());
    std::vector<uint16_t> block;
    for (const auto& t : tensors) {
      const size_t n = numel(t);
      if (t.u8) {
        sink(reinterpret_cast<const char*>(t.u8), n);
      } else if (t.bf16) {
        sink(reinterpret_cast<const char*>(t.bf16), 2 * n);
      } else if (t.as_bf16) {
        constexpr size_t kBlock = size_t{1} << 16;
        block.resize(kBlock);
        for (size_t i = 0; i < n; i += kBlock) {
          const size_t m = std::min(kBlock, n - i);
          for (size_t j = 0; j < m; ++j) block[j] = float_to_bf16(t.data[i + j]);
          sink(reinterpret_cast<const char*>(block.data()), 2 * m);
        }
      } else {
        sink(reinterpret_cast<const char*>(t.data), 4 * n);
      }
    }
  });
}

}  // namespace retnet
