#pragma once
// The model cases of the mixer family's tests (test_mixers.cpp, test_backends.cpp): every
// registered mixer alone on a tiny model, and hybrid models; perturbed weights and test tokens.
#include <ostream>
#include <string>
#include <vector>

#include "retnet/model/model.h"
#include "test_helpers.h"

namespace retnet::test {

inline Config mixer_config(const MixerSpec* kind) {
  Config c = tiny_config();
  c.mixer = kind;
  c.recurrent_chunk_size = 8;
  // AFT's biases shorter than the test sequences: the clamp matters.
  set_mixer_options(c, R"({"performer_features": 12, "aft_max_distance": 16})");
  return c;
}

// One parameter of the suite: every mixer alone, and hybrid models.
struct MixerCase {
  std::string name;
  Config config;
};

// Test names and messages show a case by its name, not its bytes.
inline void PrintTo(const MixerCase& c, std::ostream* os) { *os << c.name; }

// tiny_config's model with the given "mixer" list (and other fields).
inline Config hybrid_config(const std::string& fields) {
  return Config::from_json(R"({"decoder_embed_dim": 16, "decoder_value_embed_dim": 24,
    "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20, "vocab_size": 30,
    "recurrent_chunk_size": 8, )" +
                           fields + "}");
}

inline std::vector<MixerCase> mixer_cases() {
  std::vector<MixerCase> cases;
  for (const MixerSpec* m : mixer_registry()) cases.push_back({m->scope, mixer_config(m)});
  // Retention with every fourth layer attention (4 query heads over 2 kv heads, q/k/v biases,
  // value width d as fla's attention layers have).
  cases.push_back({"hybrid_retention_attention", hybrid_config(R"("decoder_layers": 4,
    "mixer": ["retention", "retention", "retention", {"mixer": "attention", "heads": 4,
      "kv_heads": 2, "qkv_bias": true, "value_dim": 16}])")});
  // Attention first; two attention layers with different options (a sliding window of 5 tokens in
  // one); a half-split rotation with the attention layers' own bases.
  cases.push_back({"hybrid_attention_first", hybrid_config(R"("decoder_layers": 3,
    "rotary": "half_split", "attention": {"rope_theta": 500},
    "mixer": ["attention", "retention",
              {"mixer": "attention", "heads": 1, "rope_theta": 50, "window_size": 5}])")});
  // Attention layers that cache different widths (one kv head for four query heads; two heads
  // of their own widths), around retention.
  cases.push_back({"hybrid_attention_widths", hybrid_config(R"("decoder_layers": 3,
    "mixer": [{"mixer": "attention", "heads": 4, "kv_heads": 1}, "retention",
              {"mixer": "attention", "heads": 2, "value_dim": 8}])")});
  // Two constant-state mixers: every form, chunkwise training included.
  cases.push_back({"hybrid_retention_rwkv",
                   hybrid_config(R"("decoder_layers": 2, "mixer": ["rwkv", "retention"])")});
  return cases;
}

// A model whose weights are not at their initial symmetric values (norm weights of 1, zero
// biases), so every tensor shapes the output.
inline Model perturbed_model(const Config& config, uint64_t seed) {
  Model m = Model::init(config, seed);
  const auto& layout = m.params().layout();
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].name.find("feature_matrix") != std::string::npos) continue;
    auto noise = random_vector(layout[i].numel, seed + 1, 0.1, i);
    float* p = m.params().tensor(i);
    for (size_t j = 0; j < layout[i].numel; ++j) p[j] += noise[j];
  }
  return m;
}

inline std::vector<int32_t> tokens_of(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7 + salt * 13 + i * i) % vocab);
  return t;
}

}  // namespace retnet::test
