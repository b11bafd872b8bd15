#include "retnet/infer/state_file.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "retnet/core/byte_buffer.h"
#include "retnet/core/error.h"
#include "retnet/core/half.h"
#include "retnet/core/hash.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"

namespace retnet {
namespace {

constexpr char kMagic[8] = {'R', 'E', 'T', 'N', 'E', 'T', 'S', 'T'};
constexpr size_t kMaxHeader = 1 << 20;

// A header count: a JSON integer in [0, 2^40] (1.5, -1 or 1e30 would be truncated or wrapped by
// a plain get<>, and the file read as something it does not say).
int64_t count_field(const nlohmann::json& header, const char* key, const std::string& path) {
  RETNET_CHECK(header.is_object() && header.contains(key),
               "state file '{}' has an incomplete header: no '{}'", path, key);
  const nlohmann::json& v = header[key];
  constexpr int64_t kMax = int64_t{1} << 40;
  const bool ok = (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t{kMax}) ||
                  (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMax);
  RETNET_CHECK(ok, "state file '{}': header field '{}' is {}; expected an integer in [0, {}]", path,
               key, v.dump(), kMax);
  return v.get<int64_t>();
}

}  // namespace

void write_state_file(const std::string& path, const Model& model, uint64_t fingerprint,
                      const SavedSequence& s) {
  write_file_atomically(path, state_file_bytes(model, fingerprint, s));
}

std::string state_file_bytes(const Model& model, uint64_t fingerprint, const SavedSequence& s,
                             StateDtype dtype) {
  const Config& c = model.config();
  RETNET_CHECK(static_cast<int64_t>(s.state.size()) == c.state_floats_per_sequence(),
               "state holds {} floats; the model's state has {}", s.state.size(),
               c.state_floats_per_sequence());
  RETNET_CHECK(static_cast<int64_t>(s.cache.size()) == s.position * c.cache_floats_per_token(),
               "cache holds {} floats; {} tokens of this model's cache are {}", s.cache.size(),
               s.position, s.position * c.cache_floats_per_token());
  nlohmann::json header = {
      {"model_fingerprint", hex64(fingerprint)},
      {"config", nlohmann::json::parse(c.to_json())},
      {"position", s.position},
      {"state_floats", s.state.size()},
      {"cache_floats", s.cache.size()},
      {"logits", s.logits.size()},
      {"recent_tokens", s.recent.size()},
      {"text_tail_bytes", s.text_tail.size()},
  };
  // Absent for float32: such files read as they always have.
  const bool bf16 = dtype == StateDtype::BF16;
  if (bf16) header["state_dtype"] = "bf16";
  const std::string h = header.dump();
  std::string out(kMagic, sizeof kMagic);
  const uint32_t version = kStateFileVersion, header_len = static_cast<uint32_t>(h.size());
  append_raw(out, &version, 1);
  append_raw(out, &header_len, 1);
  out += h;
  for (const std::vector<float>* values : {&s.state, &s.cache}) {
    if (!bf16) {
      append_raw(out, values->data(), values->size());
      continue;
    }
    const size_t at = out.size();
    out.resize(at + values->size() * sizeof(uint16_t));
    for (size_t i = 0; i < values->size(); ++i) {
      const uint16_t h = float_to_bf16((*values)[i]);
      std::memcpy(out.data() + at + i * sizeof h, &h, sizeof h);
    }
  }
  append_raw(out, s.logits.data(), s.logits.size());
  append_raw(out, s.recent.data(), s.recent.size());
  out += s.text_tail;
  const uint64_t sum = fnv1a(out.data(), out.size());
  append_raw(out, &sum, 1);
  return out;
}

SavedSequence read_state_file(const std::string& path, const Model& model, uint64_t fingerprint) {
  return parse_state_file(read_file(path, "state file"), path, model, fingerprint);
}

SavedSequence parse_state_file(const std::string& bytes, const std::string& path,
                               const Model& model, uint64_t fingerprint) {
  const size_t fixed = sizeof kMagic + 8;
  RETNET_CHECK(bytes.size() >= fixed + 8 && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
               "'{}' is not a retnet state file", path);
  uint32_t version = 0, header_len = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&header_len, bytes.data() + 12, 4);
  RETNET_CHECK(version == kStateFileVersion,
               "'{}' is a state file of format version {}; this engine reads version {}", path,
               version, kStateFileVersion);
  uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  RETNET_CHECK(header_len <= kMaxHeader && fixed + header_len + 8 <= bytes.size() &&
                   fnv1a(bytes.data(), bytes.size() - 8) == stored,
               "state file '{}' is damaged or truncated (checksum mismatch)", path);
  const nlohmann::json header = parse_json(std::string_view(bytes).substr(fixed, header_len),
                                           fmt::format("state file '{}' header", path));
  SavedSequence s;
  size_t n_state = 0, n_cache = 0, n_logits = 0, n_recent = 0, n_tail = 0;
  std::string model_id, dtype = "f32";
  try {
    model_id = header.at("model_fingerprint").get<std::string>();
    if (header.contains("state_dtype")) dtype = header["state_dtype"].get<std::string>();
    s.position = count_field(header, "position", path);
    n_state = count_field(header, "state_floats", path);
    // Absent in files of the retention-only engine, whose models have no cache.
    n_cache = header.contains("cache_floats") ? count_field(header, "cache_floats", path) : 0;
    n_logits = count_field(header, "logits", path);
    n_recent = count_field(header, "recent_tokens", path);
    n_tail = count_field(header, "text_tail_bytes", path);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("state file '{}' has an incomplete header: {}", path, e.what()));
  }
  RETNET_CHECK(dtype == "f32" || dtype == "bf16",
               "state file '{}' stores its state as '{}'; this engine reads f32 and bf16", path,
               dtype);
  const size_t state_width = dtype == "bf16" ? 2 : 4;
  const Config& c = model.config();
  if (model_id != hex64(fingerprint)) {
    std::string theirs = header.contains("config") ? header["config"].dump() : "(none)";
    throw Error(
        fmt::format("state file '{}' was saved by another model (fingerprint {}, config "
                    "{}); this model is {} with config {}",
                    path, model_id, theirs, hex64(fingerprint), c.to_json()));
  }
  RETNET_CHECK(static_cast<int64_t>(n_state) == c.state_floats_per_sequence() &&
                   (n_logits == 0 || static_cast<int64_t>(n_logits) == c.vocab_size) &&
                   s.position >= 0 && (n_logits == 0) == (s.position == 0) &&
                   s.position <= (int64_t{1} << 40) &&
                   static_cast<int64_t>(n_cache) == s.position * c.cache_floats_per_token(),
               "state file '{}' holds {} state floats and {} logits at position {}; the model "
               "needs {} and {}",
               path, n_state, n_logits, s.position, c.state_floats_per_sequence(), c.vocab_size);
  // Each section against the bytes left for it, one by one: the header's counts are untrusted,
  // and a sum of their sizes can wrap around.
  size_t left = bytes.size() - fixed - header_len - 8;
  auto section = [&](const char* field, size_t count, size_t width) {
    RETNET_CHECK(count <= left / width,
                 "state file '{}': its {} field says {} ({} bytes each), the file has {} bytes "
                 "left for it",
                 path, field, count, width, left);
    left -= count * width;
  };
  section("state_floats", n_state, state_width);
  section("cache_floats", n_cache, state_width);
  section("logits", n_logits, 4);
  section("recent_tokens", n_recent, 4);
  section("text_tail_bytes", n_tail, 1);
  RETNET_CHECK(left == 0, "state file '{}' has {} bytes more than its header describes", path,
               left);
  const char* p = bytes.data() + fixed + header_len;
  // Each section: resize, then copy (memcpy of nothing into an empty vector's null data() is UB).
  auto take = [&p](auto& v, size_t n) {
    v.resize(n);
    if (n > 0) std::memcpy(v.data(), p, n * 4);
    p += n * 4;
  };
  // A bfloat16 section, widened.
  auto widen = [&p](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (size_t i = 0; i < n; ++i, p += 2) {
      uint16_t h = 0;
      std::memcpy(&h, p, 2);
      v[i] = bf16_to_float(h);
    }
  };
  if (state_width == 2) {
    widen(s.state, n_state);
    widen(s.cache, n_cache);
  } else {
    take(s.state, n_state);
    take(s.cache, n_cache);
  }
  take(s.logits, n_logits);
  take(s.recent, n_recent);
  s.text_tail.assign(p, n_tail);
  for (int32_t t : s.recent)
    RETNET_CHECK(t >= 0 && t < c.vocab_size, "state file '{}' holds token id {} out of range", path,
                 t);
  return s;
}

}  // namespace retnet
