// Hugging Face directories whose tensors are stored in the inference dtype, used where they lie in
// the mapped files (load_hf_directory_for_inference with in_place): the same function as the
// packed copy of the same weights (f32, bf16, f16; tied and untied; decode and prefill row counts),
// the same fingerprint, a mixed directory (one tensor in another dtype is packed, the rest used in
// place), nothing read at open, a model that outlives its files' names, and truncated shards
// still refused naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/core/process_memory.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/forward.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/model.h"
#include "retnet/model/model_io.h"
#include "test_helpers.h"

using namespace retnet;
namespace fs = std::filesystem;

namespace {

// Logits of T tokens of a fixed pattern.
std::vector<float> logits_of_pattern(const Model& m, int64_t T) {
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31 + 5) % m.config().vocab_size);
  std::vector<float> logits(static_cast<size_t>(T * m.config().vocab_size));
  Arena arena;
  forward_logits(m, tokens.data(), 1, T, logits.data(), {}, arena);
  return logits;
}

// A copy of an F32 directory with every tensor stored as F16, except `keep_f32` (none if empty):
// the safetensors header written by hand, its length padded so every tensor stays aligned.
void write_f16_copy(const fs::path& from, const fs::path& to, const std::string& keep_f32 = "") {
  fs::create_directories(to);
  fs::copy_file(from / "config.json", to / "config.json");
  const SafetensorsFile in = SafetensorsFile::open((from / "model.safetensors").string());
  std::string header = "{";
  std::vector<std::vector<uint8_t>> data;
  size_t offset = 0;
  for (const SafetensorsTensor& t : in.tensors()) {
    const bool f32 = t.name == keep_f32;
    std::vector<float> values(static_cast<size_t>(t.numel()));
    copy_as_float32(t, values.data());
    std::vector<uint8_t> bytes(values.size() * (f32 ? 4 : 2));
    for (size_t i = 0; i < values.size(); ++i) {
      if (f32) {
        std::memcpy(bytes.data() + 4 * i, &values[i], 4);
      } else {
        const uint16_t h = float_to_half(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    std::string shape;
    for (int64_t s : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(s);
    header += (header.size() > 1 ? "," : "") + ("\"" + t.name + "\":{\"dtype\":\"") +
              (f32 ? "F32" : "F16") + "\",\"shape\":[" + shape + "],\"data_offsets\":[" +
              std::to_string(offset) + "," + std::to_string(offset + bytes.size()) + "]}";
    offset += bytes.size();
    while (offset % 8) {  // the next tensor starts 8-byte aligned
      bytes.push_back(0);
      ++offset;
    }
    data.push_back(std::move(bytes));
  }
  header += "}";
  while ((header.size() + 8) % 8) header += ' ';
  std::ofstream f(to / "model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  for (const auto& b : data) f.write(reinterpret_cast<const char*>(b.data()), b.size());
}

}  // namespace

TEST(InPlaceLoad, EveryDtypeComputesWhatThePackedCopyOfItsWeightsComputes) {
  const fs::path dir = test::fresh_temp_dir("in_place_load");
  for (bool tied : {false, true}) {
    const Model source = Model::init(test::fla_model_config(32, 2, 96, tied), 4);
    const fs::path f32 = dir / (tied ? "tied_f32" : "f32"), bf16 = dir / (tied ? "tied_bf16" : "bf16");
    const fs::path f16 = dir / (tied ? "tied_f16" : "f16");
    save_hf_directory(source, f32.string(), HfFlavour::Fla, "f32", {});
    save_hf_directory(source, bf16.string(), HfFlavour::Fla, "bf16", {});
    write_f16_copy(f32, f16);
    for (auto [path, p] : {std::pair{f32, DecodePrecision::F32}, {bf16, DecodePrecision::BF16},
                           {f16, DecodePrecision::F16}}) {
      SCOPED_TRACE(::testing::Message() << (tied ? "tied " : "untied ") << decode_precision_name(p));
      const Model packed = load_hf_directory_for_inference(path.string(), p, nullptr, false);
      const Model mapped = load_hf_directory_for_inference(path.string(), p, nullptr, true);
      EXPECT_EQ(mapped.packed_bytes(), 0);  // every projection and the embedding in place
      EXPECT_GT(mapped.in_place_bytes(), 0);
      EXPECT_TRUE(mapped.fingerprint_deferred());
      EXPECT_EQ(model_fingerprint(mapped), model_fingerprint(packed));
      // The same weights summed in another order: within float32 rounding. 24 rows run the
      // decode kernels, 80 the prefill path (sgemm on the mapping, or converted blocks).
      for (int64_t T : {24, 80})
        EXPECT_TRUE(test::close(logits_of_pattern(mapped, T), logits_of_pattern(packed, T), 1e-5)) << T;
    }
  }
  fs::remove_all(dir);
}

TEST(InPlaceLoad, ATensorInAnotherDtypeIsPackedAndTheRestUsedInPlace) {
  const fs::path dir = test::fresh_temp_dir("in_place_mixed");
  const Model source = Model::init(test::fla_model_config(32, 2, 96, false), 5);
  save_hf_directory(source, (dir / "f32").string(), HfFlavour::Fla, "f32", {});
  // fc1 of layer 1 (fla's gate_proj) stays F32: the fc1|gate product of that layer is packed.
  write_f16_copy(dir / "f32", dir / "mixed", "model.layers.1.mlp.gate_proj.weight");
  const Model packed =
      load_hf_directory_for_inference((dir / "mixed").string(), DecodePrecision::F16, nullptr, false);
  HfLoadInfo info;
  const Model mapped =
      load_hf_directory_for_inference((dir / "mixed").string(), DecodePrecision::F16, &info, true);
  EXPECT_EQ(info.stored_dtypes.at("F32"), 1);
  const int64_t d = 32, F = 64;
  EXPECT_EQ(mapped.packed_bytes(), 2 * static_cast<int64_t>(packed_weight_elements(2 * F, d)));
  EXPECT_GT(mapped.in_place_bytes(), 0);
  EXPECT_EQ(model_fingerprint(mapped), model_fingerprint(packed));
  EXPECT_TRUE(test::close(logits_of_pattern(mapped, 24), logits_of_pattern(packed, 24), 1e-5));
  fs::remove_all(dir);
}

TEST(InPlaceLoad, OpeningReadsNoWeightsAndTheModelOutlivesTheFileNames) {
  const fs::path dir = test::fresh_temp_dir("in_place_open");
  const std::string out = (dir / "m").string();
  // ~10M parameters: 20 MB in bf16.
  save_hf_directory(Model::init(test::fla_model_config(256, 6, 8192, false), 1), out, HfFlavour::Fla, "bf16",
                    {});
  const int64_t before = current_rss_bytes();
  std::optional<Model> model;
  model.emplace(load_hf_directory_for_inference(out, DecodePrecision::BF16));
  const double grew = static_cast<double>(current_rss_bytes() - before);
  const double weights = static_cast<double>(model->in_place_bytes());
  EXPECT_GT(weights, 19e6);
  // The packed copy would be all of it; opening in place maps the file and reads its header.
  EXPECT_LT(grew, 0.2 * weights) << "resident set grew " << grew << " bytes at open";
  const std::vector<float> first = logits_of_pattern(*model, 4);
  // The model holds the mappings: its files may lose their names (a directory replaced by a
  // download) and it keeps computing the same function; so does a copy after the original goes.
  fs::remove_all(dir);
  const Model copy = *model;
  model.reset();
  EXPECT_EQ(logits_of_pattern(copy, 4), first);
}

// Converted at load (bf16 stored, f32 / f16 / q8_0 held): nothing is used in place, but the
// model keeps the mapping, so the fingerprint (a byte-by-byte hash of every weight, about a second
// per GB) waits for its first use, and equals the one a load without the mapping computes at once.
TEST(InPlaceLoad, AConvertingLoadDefersTheFingerprintAndAgreesWithAnEagerOne) {
  const fs::path dir = test::fresh_temp_dir("in_place_deferred_fingerprint");
  const std::string out = (dir / "m").string();
  save_hf_directory(Model::init(test::fla_model_config(32, 2, 96, false), 8), out, HfFlavour::Fla,
                    "bf16", {});
  for (DecodePrecision p : {DecodePrecision::F32, DecodePrecision::F16, DecodePrecision::Q8_0}) {
    SCOPED_TRACE(decode_precision_name(p));
    const Model eager = load_hf_directory_for_inference(out, p, nullptr, false);
    const Model deferred = load_hf_directory_for_inference(out, p, nullptr, true);
    EXPECT_FALSE(eager.fingerprint_deferred());
    EXPECT_TRUE(deferred.fingerprint_deferred());
    EXPECT_EQ(deferred.in_place_bytes(), 0);
    EXPECT_EQ(model_fingerprint(deferred), model_fingerprint(eager));
    EXPECT_EQ(logits_of_pattern(deferred, 4), logits_of_pattern(eager, 4));
  }
  // Every precision hashes the same float32 values: one fingerprint for the directory.
  EXPECT_EQ(model_fingerprint(load_hf_directory_for_inference(out, DecodePrecision::F32)),
            model_fingerprint(load_hf_directory(out)));
  fs::remove_all(dir);
}

TEST(InPlaceLoad, ATruncatedShardIsStillRefusedNamingTheFile) {
  const fs::path dir = test::fresh_temp_dir("in_place_truncated");
  const std::string out = (dir / "m").string();
  save_hf_directory(Model::init(test::fla_model_config(32, 2, 96, false), 2), out, HfFlavour::Fla, "bf16", {});
  const fs::path file = fs::path(out) / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  EXPECT_TRUE(test::throws_error_naming(
      [&] { load_hf_directory_for_inference(out, DecodePrecision::BF16); }, {"model.safetensors"}));
  fs::remove_all(dir);
}

namespace {

// Overwrites element `index` of tensor `name` in a directory's model.safetensors with `bits` (a
// 16-bit value: a bf16 or f16 NaN or infinity).
void poke_half(const fs::path& dir, const std::string& name, int64_t index, uint16_t bits) {
  const fs::path file = dir / "model.safetensors";
  uint64_t header_bytes = 0;
  size_t offset = 0;
  {
    const SafetensorsFile in = SafetensorsFile::open(file.string());
    const SafetensorsTensor* t = nullptr;
    for (const SafetensorsTensor& x : in.tensors())
      if (x.name == name) t = &x;
    ASSERT_NE(t, nullptr) << name;
    std::ifstream f(file, std::ios::binary);
    f.read(reinterpret_cast<char*>(&header_bytes), 8);
    offset = 8 + header_bytes + t->data_offset + 2 * static_cast<size_t>(index);
  }
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(&bits), 2);
}

}  // namespace

// A used-in-place tensor is not read at open; its values are scanned when a forward pass first
// uses it, and a NaN or infinity is an error naming the tensor (every time, not only the first).
TEST(InPlaceLoad, ANonFiniteWeightIsAnErrorNamingTheTensorAtFirstUse) {
  const fs::path dir = test::fresh_temp_dir("in_place_nan");
  const Model source = Model::init(test::fla_model_config(32, 2, 96, false), 6);
  struct Case {
    const char* file_tensor;  // fla's name in the file
    const char* engine_part;  // what the error names
    int64_t index;            // row 1, column 5 of the tensor (32 columns, or 64 for down_proj)
    uint16_t bits;            // a NaN, +infinity, -infinity
  };
  for (const Case& c : {Case{"model.layers.1.attn.k_proj.weight", "layers.1.", 37, 0x7fc0},
                        Case{"model.layers.0.mlp.down_proj.weight", "layers.0.", 69, 0x7f80},
                        Case{"model.embeddings.weight", "embed", 37, 0xff80}}) {
    SCOPED_TRACE(c.file_tensor);
    const fs::path out = dir / "m";
    fs::remove_all(out);
    save_hf_directory(source, out.string(), HfFlavour::Fla, "bf16", {});
    poke_half(out, c.file_tensor, c.index, c.bits);
    const Model mapped = load_hf_directory_for_inference(out.string(), DecodePrecision::BF16);
    ASSERT_GT(mapped.in_place_bytes(), 0);
    for (int attempt = 0; attempt < 2; ++attempt)
      EXPECT_TRUE(test::throws_error_naming([&] { logits_of_pattern(mapped, 4); },
                                            {c.engine_part, "non-finite", "row 1, column 5"}));
  }
  // The same directory without the poke computes, and scans once.
  fs::remove_all(dir / "m");
  save_hf_directory(source, (dir / "m").string(), HfFlavour::Fla, "bf16", {});
  const Model clean = load_hf_directory_for_inference((dir / "m").string(), DecodePrecision::BF16);
  EXPECT_EQ(logits_of_pattern(clean, 4), logits_of_pattern(clean, 4));
  fs::remove_all(dir);
}
