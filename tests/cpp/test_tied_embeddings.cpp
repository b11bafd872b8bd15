// Tied embeddings (torchscale's share_decoder_input_output_embed, Hugging Face's
// tie_word_embeddings): one tensor serves as embedding and LM head. Against an untied model whose
// head is a copy of its embedding: the same logits (float32 and every inference dtype, where the
// tied model looks its rows up in the head's packed panels), a gradient that is the sum of the
// untied model's two, one tensor fewer in memory and in exported files.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/forward.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/model.h"
#include "retnet/model/training.h"
#include "test_support.h"

using namespace retnet;
using test::logits_of;
namespace fs = std::filesystem;

namespace {

Config tied_config() {
  Config c = test::fla_conventions(test::model_config(32, 64, 4, 96, 2, 200));
  c.tie_embeddings = true;
  return c;
}

// The untied model computing the same function: its head is a copy of the tied embedding.
Model untied_twin(const Model& tied) {
  Config c = tied.config();
  c.tie_embeddings = false;
  ModelTensors t;
  ParamBuffer params(make_param_layout(c, &t));
  const ParamLayout& from = tied.params().layout();
  for (size_t i = 0; i < from.size(); ++i)
    std::memcpy(params.tensor(from[i].name), tied.params().tensor(i), from[i].numel * 4);
  std::memcpy(params.tensor(t.output_projection), tied.params().tensor(tied.tensors().embed),
              from[tied.tensors().embed].numel * 4);
  return Model(c, std::move(params));
}

std::vector<int32_t> some_tokens(int64_t T, int64_t vocab) {
  std::vector<int32_t> t(T);
  for (int64_t i = 0; i < T; ++i) t[i] = static_cast<int32_t>((i * 53 + 7) % vocab);
  return t;
}

}  // namespace

TEST(TiedEmbeddings, OneTensorServesBothUses) {
  const Model tied = Model::init(tied_config(), 3);
  const Model untied = untied_twin(tied);
  const Config& c = tied.config();
  EXPECT_EQ(tied.tensors().output_projection, tied.tensors().embed);
  EXPECT_EQ(tied.params().layout().find("output_projection.weight"), nullptr);
  EXPECT_EQ(tied.parameter_count(), c.parameter_count());
  EXPECT_EQ(untied.parameter_count() - tied.parameter_count(), c.vocab_size * c.embed_dim);
  // The config says so in torchscale's key, and reads back.
  EXPECT_EQ(Config::from_json(c.to_json()).tie_embeddings, true);
  EXPECT_NE(c.to_json().find("\"share_decoder_input_output_embed\":true"), std::string::npos);
}

TEST(TiedEmbeddings, LogitsEqualTheUntiedCopyInEveryDtype) {
  const std::vector<int32_t> tokens = some_tokens(40, 200);
  for (DecodePrecision p : {DecodePrecision::F32, DecodePrecision::BF16, DecodePrecision::F16}) {
    SCOPED_TRACE(decode_precision_name(p));
    Model tied = Model::init(tied_config(), 5);
    Model untied = untied_twin(tied);
    EXPECT_EQ(logits_of(tied, tokens), logits_of(untied, tokens));
    tied.prepare_inference(p);
    untied.prepare_inference(p);
    EXPECT_FALSE(tied.weights_complete());
    // The same rounded values, looked up in the head's panels instead of a row-major copy.
    EXPECT_EQ(logits_of(tied, tokens), logits_of(untied, tokens));
    // One packed copy of the vocabulary matrix, not two: in f16/bf16 the untied model also keeps
    // a row-major copy of its embedding; in f32 its float32 embedding stays.
    EXPECT_EQ(tied.packed_bytes(), untied.packed_bytes());
  }
}

TEST(TiedEmbeddings, GradientIsTheSumOfBothUses) {
  const Model tied = Model::init(tied_config(), 7);
  const Model untied = untied_twin(tied);
  const int64_t B = 2, T = 12;
  const std::vector<int32_t> tokens = some_tokens(B * T + 1, 200);
  const int32_t* inputs = tokens.data();
  const int32_t* targets = tokens.data() + 1;
  Arena arena;
  ParamBuffer g_tied(tied.params().layout()), g_untied(untied.params().layout());
  const double loss_tied = loss_and_gradients(tied, inputs, targets, B, T, {}, arena, &g_tied);
  const double loss_untied =
      loss_and_gradients(untied, inputs, targets, B, T, {}, arena, &g_untied);
  EXPECT_EQ(loss_tied, loss_untied);
  const ModelTensors& tt = tied.tensors();
  const ModelTensors& ut = untied.tensors();
  const size_t n = tied.params().layout()[tt.embed].numel;
  const float* ge = g_untied.tensor(ut.embed);
  const float* gh = g_untied.tensor(ut.output_projection);
  const float* g = g_tied.tensor(tt.embed);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(g[i]));
    worst = std::max(worst, std::fabs(static_cast<double>(g[i]) - (ge[i] + gh[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(ge[i]) + gh[i]));
  }
  EXPECT_GT(scale, 0);
  EXPECT_LE(worst, 1e-6 * scale);
  // Every other gradient is the untied model's.
  for (size_t i = 0; i < tied.params().layout().size(); ++i) {
    if (i == tt.embed) continue;
    const ParamEntry& e = tied.params().layout()[i];
    EXPECT_EQ(0, std::memcmp(g_tied.tensor(i), g_untied.tensor(e.name), e.numel * 4)) << e.name;
  }
}

TEST(TiedEmbeddings, ExportWritesOneTensorAndImportsBack) {
  const fs::path dir = test::fresh_temp_dir("tied_export");
  const Model tied = Model::init(tied_config(), 9);
  const std::string out = (dir / "fla").string();
  save_hf_directory(tied, out, HfFlavour::Fla, "f32", {});
  const SafetensorsFile file = SafetensorsFile::open(out + "/model.safetensors");
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);
  EXPECT_NE(file.find("model.embeddings.weight"), nullptr);
  HfLoadInfo info;
  const Model back = load_hf_directory(out, &info);
  EXPECT_TRUE(info.hf.tied_embeddings);
  EXPECT_TRUE(back.config().tie_embeddings);
  ASSERT_EQ(back.params().size(), tied.params().size());
  EXPECT_EQ(0, std::memcmp(back.params().data(), tied.params().data(), tied.params().size() * 4));

  // A file that stores the head too (as a state_dict does) loads when it equals the embedding,
  // and is refused, naming the tensor, when it does not.
  std::vector<float> head(tied.params().tensor(tied.tensors().embed),
                          tied.params().tensor(tied.tensors().embed) +
                              tied.params().layout()[tied.tensors().embed].numel);
  auto write_with_head = [&](const std::string& name) {
    const std::string d = (dir / name).string();
    save_hf_directory(tied, d, HfFlavour::Fla, "f32", {});
    std::vector<TensorToWrite> tensors;
    const ParamLayout& layout = tied.params().layout();
    for (size_t i = 0; i < layout.size(); ++i)
      tensors.push_back({hf_tensor_name(layout[i].name, HfFlavour::Fla), layout[i].shape,
                         tied.params().tensor(i)});
    tensors.push_back({"lm_head.weight", layout[tied.tensors().embed].shape, head.data()});
    write_safetensors(d + "/model.safetensors", tensors, {{"format", "pt"}});
    return d;
  };
  EXPECT_NO_THROW(load_hf_directory(write_with_head("same")));
  head[5] += 1.f;
  EXPECT_TRUE(test::throws_error_naming([&] { load_hf_directory(write_with_head("differs")); },
                                        {"lm_head.weight"}));
  fs::remove_all(dir);
}
