#pragma once
// The models the session tests run on: every registered mixer and a hybrid (retention with an
// attention layer), tiny, with chunks short enough that a prompt spans several.
#include <ostream>
#include <string>
#include <vector>

#include "retnet/model/config.h"
#include "retnet/model/mixer.h"
#include "test_helpers.h"

namespace retnet::test {

struct SessionCase {
  std::string name;
  Config config;
};
inline void PrintTo(const SessionCase& c, std::ostream* os) { *os << c.name; }

inline std::vector<SessionCase> session_cases() {
  std::vector<SessionCase> cases;
  for (const MixerSpec* m : mixer_registry()) {
    Config c = tiny_config();
    c.mixer = m;
    c.recurrent_chunk_size = 4;
    test::set_mixer_options(c, R"({"performer_features": 12})");
    cases.push_back({m->scope, c});
  }
  cases.push_back({"hybrid", Config::from_json(R"({"decoder_embed_dim": 16,
    "decoder_value_embed_dim": 24, "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20,
    "vocab_size": 30, "decoder_layers": 2, "recurrent_chunk_size": 4,
    "mixer": ["retention", {"mixer": "attention", "heads": 2}]})")});
  return cases;
}

}  // namespace retnet::test
