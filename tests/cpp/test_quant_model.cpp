// Quantised models: --dtype q8_0/q4_1/q4_0 at load (prepare_inference) and files written by
// `retnet quantize` (save_quantized_model): logits within a stated bound of float32 for every
// mixer, batched decoding equal to single-sequence decoding, a file giving the same logits as
// quantising at load, Hugging Face directories, fingerprints, and bad files refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <unistd.h>

#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/quant.h"
#include "retnet/core/safetensors.h"
#include "retnet/infer/session.h"
#include "retnet/model/forward.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/mixer.h"
#include "retnet/model/model_io.h"
#include "retnet/model/quant_io.h"
#include "test_support.h"

using namespace retnet;
using test::logits_of;
namespace fs = std::filesystem;

namespace {

constexpr DecodePrecision kQuant[] = {DecodePrecision::Q8_0, DecodePrecision::Q4_1,
                                      DecodePrecision::Q4_0};

// Widths that are multiples of 32 (the blocks run along every projection's input).
Config quant_config() {
  Config c = test::model_config(64, 64, 4, 96, 2, 256);
  c.recurrent_chunk_size = 8;
  return c;
}

std::vector<int32_t> quant_tokens_of(int64_t T, int64_t vocab) {
  std::vector<int32_t> t(T);
  for (int64_t i = 0; i < T; ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return t;
}

// The stated bounds, max |logit - f32 logit| / max |f32 logit| over every mixer (random init, 40
// tokens, int8 activations; measured at most 0.022 for q8_0 and 0.20 for q4_0: 4-bit blocks keep
// 16 levels, 16x coarser than 8-bit ones).
double quant_logit_bound(DecodePrecision p) { return p == DecodePrecision::Q8_0 ? 0.05 : 0.4; }

}  // namespace

TEST(QuantModel, LogitsOfEveryTypeStayWithinTheirBoundOfF32ForEveryMixer) {
  for (const MixerSpec* mixer : mixer_registry()) {
    Config c = quant_config();
    c.mixer = mixer;
    test::set_mixer_options(c, R"({"performer_features": 32, "aft_max_distance": 16})");
    const Model exact = Model::init(c, 5);
    const auto tokens = quant_tokens_of(40, 256);
    const auto reference = logits_of(exact, tokens);
    for (DecodePrecision p : kQuant) {
      SCOPED_TRACE(std::string(mixer->name) + " " + decode_precision_name(p));
      Model m = Model::init(c, 5);
      m.prepare_inference(p);
      EXPECT_FALSE(m.weights_complete());
      const auto logits = logits_of(m, tokens);
      EXPECT_TRUE(test::close(logits, reference, quant_logit_bound(p)));
      EXPECT_GT(test::rel_max_error(logits, reference), 0.0) << "quantised weights should round";
    }
  }
}

TEST(QuantModel, ATiedEmbeddingIsReadFromTheQuantisedHead) {
  // Tied: the embedding is the LM head, so quantising the head releases the embedding's float32
  // rows; the lookup dequantises the head's rows instead.
  Config c = quant_config();
  c.tie_embeddings = true;
  const auto tokens = quant_tokens_of(40, 256);
  const auto reference = logits_of(Model::init(c, 5), tokens);
  for (DecodePrecision p : kQuant) {
    SCOPED_TRACE(decode_precision_name(p));
    Model m = Model::init(c, 5);
    m.prepare_inference(p);
    EXPECT_FALSE(m.weights_complete());
    EXPECT_TRUE(test::close(logits_of(m, tokens), reference, quant_logit_bound(p)));
  }
}

TEST(QuantModel, DecodingFollowsPrefillAndBatchedSequencesEqualSingleOnes) {
  // Prefill (80 rows: dequantised to sgemm) then decoding (int8 activations): the decoded logits
  // follow the parallel ones within the activations' rounding; a batch of two sequences decodes
  // bit for bit like each alone.
  const auto tokens = quant_tokens_of(90, 256);
  for (DecodePrecision p : kQuant) {
    SCOPED_TRACE(decode_precision_name(p));
    Model m = Model::init(quant_config(), 9);
    m.prepare_inference(p);
    const auto all = logits_of(m, tokens);
    SessionOptions two;
    two.capacity = 2;
    Session alone(m), both(m, two);
    alone.add_sequence();
    both.add_sequence();
    both.add_sequence();
    alone.prefill(0, tokens.data(), 80);
    both.prefill(0, tokens.data(), 80);
    both.prefill(1, tokens.data() + 3, 40);
    for (int64_t t = 80; t < 90; ++t) {
      const std::vector<float> expected(all.begin() + (t - 1) * 256, all.begin() + t * 256);
      const std::vector<float> got(alone.logits(0), alone.logits(0) + 256);
      ASSERT_TRUE(test::close(got, expected, 0.02)) << "position " << t;
      ASSERT_TRUE(std::equal(got.begin(), got.end(), both.logits(0))) << "position " << t;
      alone.step(&tokens[t]);
      const int32_t pair[2] = {tokens[t], tokens[t - 50]};
      both.step(pair);
    }
  }
}

TEST(QuantModel, AQuantisedFileGivesTheLogitsOfQuantisingAtLoad) {
  const fs::path dir = test::fresh_temp_dir("quant_file");
  const Model f32 = Model::init(quant_config(), 11);
  const auto tokens = quant_tokens_of(30, 256);
  for (DecodePrecision p : kQuant)
    for (bool keep_head : {false, true}) {
      SCOPED_TRACE(std::string(decode_precision_name(p)) + (keep_head ? " head f32" : ""));
      const std::string path = (dir / "q.safetensors").string();
      save_quantized_model(f32, path, *decode_quant_type(p), keep_head);
      LoadInfo li;
      const Model loaded = load_model(path, std::nullopt, &li);
      EXPECT_EQ(loaded.decode_precision(), p);
      EXPECT_EQ(loaded.head_kept_f32(), keep_head);
      EXPECT_FALSE(loaded.weights_complete());
      EXPECT_EQ(li.source_dtype, std::string(decode_precision_name(p)) + "+F32");
      Model at_load = Model::init(quant_config(), 11);
      LoadPlan plan(p);
      plan.keep_head_f32 = keep_head;
      at_load.prepare_inference(plan);
      EXPECT_EQ(logits_of(loaded, tokens), logits_of(at_load, tokens));
      // State files are tied to the weights: equal for equal files, not across types.
      EXPECT_EQ(model_fingerprint(loaded), model_fingerprint(load_model(path)));
      EXPECT_NE(model_fingerprint(loaded), model_fingerprint(f32));
      // The file is smaller than float32 by about the bits per weight.
      EXPECT_LT(li.stored_bytes, static_cast<int64_t>(f32.parameter_count() * 4));
      // f32 (every command's default) and its own type use it as loaded; another type is refused,
      // and so are training and quantising again.
      Model again = load_model(path);
      EXPECT_NO_THROW(prepare_loaded_for_inference(again, DecodePrecision::F32, "--dtype"));
      EXPECT_NO_THROW(prepare_loaded_for_inference(again, p, "--dtype"));
      EXPECT_TRUE(test::throws_error_naming(
          [&] { prepare_loaded_for_inference(again, DecodePrecision::BF16, "--dtype"); },
          {"--dtype bf16", "quantised", decode_precision_name(p)}));
      EXPECT_TRUE(test::throws_error_naming([&] { again.params(); },
                                            {"training", "quantised", decode_precision_name(p)}));
      EXPECT_TRUE(test::throws_error_naming(
          [&] { save_quantized_model(again, path + ".2", QuantType::Q8_0, false); },
          {"quantising the model", "quantised"}));
    }
}

TEST(QuantModel, HuggingFaceDirectoriesQuantise) {
  const fs::path dir = test::fresh_temp_dir("quant_hf");
  const Model f32 = Model::init(quant_config(), 12);
  save_hf_directory(f32, (dir / "hf").string(), HfFlavour::Syncdoth, "f32", {});
  Model imported = load_model((dir / "hf").string());
  const std::string path = (dir / "q.safetensors").string();
  save_quantized_model(imported, path, QuantType::Q4_1, false);
  imported.prepare_inference(DecodePrecision::Q4_1);
  const auto tokens = quant_tokens_of(20, 256);
  EXPECT_EQ(logits_of(load_model(path), tokens), logits_of(imported, tokens));
}

namespace {

// A quantised file rewritten with one change: `edit` gets every tensor's bytes and the metadata.
struct FileParts {
  std::vector<TensorToWrite> tensors;
  std::map<std::string, std::string> metadata;
};

std::string rewritten(const std::string& path, const std::string& out,
                      const std::function<void(FileParts&, std::vector<std::vector<uint8_t>>&)>&
                          edit) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  FileParts parts;
  parts.metadata = file.metadata();
  std::vector<std::vector<uint8_t>> bytes;
  bytes.reserve(file.tensors().size() + 1);
  for (const auto& t : file.tensors()) {
    bytes.emplace_back(t.data, t.data + t.nbytes);
    TensorToWrite w{t.name, t.shape};
    if (t.dtype == "U8")
      w.u8 = bytes.back().data();
    else
      w.data = reinterpret_cast<const float*>(bytes.back().data());
    parts.tensors.push_back(w);
  }
  edit(parts, bytes);
  write_safetensors(out, parts.tensors, parts.metadata);
  return out;
}

}  // namespace

TEST(QuantModel, BadQuantisedFilesAreClearErrors) {
  const fs::path dir = test::fresh_temp_dir("quant_bad");
  const std::string good = (dir / "good.safetensors").string();
  save_quantized_model(Model::init(quant_config(), 13), good, QuantType::Q4_0, false);
  const std::string q = "layers.0.retention.k_proj.weight";
  auto find = [](FileParts& p, const std::string& name) -> TensorToWrite& {
    for (auto& t : p.tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no " + name);
  };
  // A size that does not match the shape and the type (blocks cut short: their scales missing).
  const auto short_rows = rewritten(good, (dir / "a.safetensors").string(), [&](auto& p, auto&) {
    find(p, q).shape[1] -= 2;
  });
  EXPECT_TRUE(test::throws_error_naming([&] { load_model(short_rows); },
                                        {short_rows, q, "bytes", "q4_0"}));
  // An unknown type.
  const auto unknown = rewritten(good, (dir / "b.safetensors").string(), [&](auto& p, auto&) {
    p.metadata[kQuantizationKey] = "q5_k";
  });
  EXPECT_TRUE(test::throws_error_naming([&] { load_model(unknown); }, {"q5_k", "quantization"}));
  // A quantised tensor whose metadata entry is missing.
  const auto unnamed = rewritten(good, (dir / "c.safetensors").string(), [&](auto& p, auto&) {
    p.metadata.erase(kQuantTensorPrefix + q);
  });
  EXPECT_TRUE(test::throws_error_naming([&] { load_model(unnamed); }, {q, "U8", "metadata"}));
  // A non-finite scale.
  const auto nan_scale = rewritten(good, (dir / "d.safetensors").string(), [&](auto& p, auto&) {
    uint8_t* block = const_cast<uint8_t*>(find(p, q).u8) + 18;  // the second block's scale
    block[0] = 0x00, block[1] = 0x7e;
  });
  EXPECT_TRUE(test::throws_error_naming([&] { load_model(nan_scale); }, {q, "scale", "block 1"}));
  // Two types in one file.
  const auto mixed = rewritten(good, (dir / "e.safetensors").string(), [&](auto& p, auto&) {
    p.metadata[kQuantTensorPrefix + q] = "q8_0";
  });
  EXPECT_TRUE(test::throws_error_naming([&] { load_model(mixed); }, {q, "q8_0", "q4_0"}));
  // Widths that are not multiples of 32 cannot be quantised, at load or into a file.
  Model odd = Model::init(test::small_decode_config(), 1);  // value width 48
  EXPECT_TRUE(test::throws_error_naming([&] { odd.prepare_inference(DecodePrecision::Q8_0); },
                                        {"out_proj", "48", "multiple of 32"}));
  EXPECT_TRUE(test::throws_error_naming(
      [&] {
        save_quantized_model(Model::init(test::small_decode_config(), 1),
                             (dir / "f.safetensors").string(), QuantType::Q8_0, false);
      },
      {"multiple of 32"}));
}

// A quantised file's stored blocks are repacked into panels a slab of 256 rows at a time; with
// d = 96 the q|k|v|g product has 384 rows over four tensors, so a slab boundary falls inside one
// of them: the loaded model computes exactly what quantising the same weights at load computes.
TEST(QuantModel, AStoredFileWhoseProductsSpanSeveralSlabsLoadsExactly) {
  Config c = test::model_config(96, 96, 4, 96, 2, 256);
  c.recurrent_chunk_size = 8;
  const Model source = Model::init(c, 12);
  const auto tokens = quant_tokens_of(24, 256);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("quant_slabs_" + std::to_string(getpid()) +
                                                 ".safetensors"))
          .string();
  for (DecodePrecision p : kQuant) {
    SCOPED_TRACE(decode_precision_name(p));
    save_quantized_model(source, path, *decode_quant_type(p), false);
    const Model loaded = load_model(path);
    Model at_load = Model::init(c, 12);
    at_load.prepare_inference(p);
    EXPECT_EQ(logits_of(loaded, tokens), logits_of(at_load, tokens));
  }
  std::filesystem::remove(path);
}
