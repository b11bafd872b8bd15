// tokenizer.json files built to exhaust the loader or the encoder end in an Error naming the file,
// the key and what was exceeded: nested or long Sequences, steps that multiply the text, ids far
// past the entries the file lists, ids shared by two tokens, and an empty vocabulary; and a model
// config.json's special token ids must be ids of its vocabulary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "retnet/core/error.h"
#include "retnet/model/hf_directory.h"
#include "retnet/text/tokenizer.h"

using nlohmann::json;

namespace tokenizer_limits_test {

// A byte-level BPE over "a", "b", "ab" and the added token "<|end|>".
json small_json() {
  return {{"model",
           {{"type", "BPE"},
            {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}},
            {"merges", json::array({"a b"})}}},
          {"added_tokens", json::array({{{"id", 3}, {"content", "<|end|>"}, {"special", true}}})}};
}

std::string error_of(const json& j) {
  try {
    retnet::make_hf_tokenizer(j.dump(), "limits.json");
  } catch (const retnet::Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

json sequence_of(const json& item, int n) {
  json list = json::array();
  for (int i = 0; i < n; ++i) list.push_back(item);
  return {{"type", "Sequence"}, {"pretokenizers", list}};
}

TEST(TokenizerLimits, SequencesAreBoundedInDepthAndLength) {
  // 50,000 nested Sequences: the JSON depth limit stops the file itself.
  std::string deep;
  for (int i = 0; i < 50'000; ++i) deep += R"({"type": "Sequence", "pretokenizers": [)";
  deep += "null";
  for (int i = 0; i < 50'000; ++i) deep += "]}";
  json j = small_json();
  std::string text = j.dump();
  text.insert(1, "\"pre_tokenizer\": " + deep + ", ");
  std::string e;
  try {
    retnet::make_hf_tokenizer(text, "limits.json");
  } catch (const retnet::Error& err) {
    e = err.what();
  }
  EXPECT_TRUE(has(e, "limits.json") && has(e, "nested deeper than 128 levels")) << e;
  // 40 nested Sequences fit in the JSON limit and are refused by the builder.
  for (const char* section : {"pre_tokenizer", "normalizer", "decoder"}) {
    const std::string list = std::string(section) == "pre_tokenizer" ? "pretokenizers"
                             : std::string(section) == "normalizer"  ? "normalizers"
                                                                     : "decoders";
    json nested = nullptr;
    for (int i = 0; i < 40; ++i) nested = {{"type", "Sequence"}, {list, json::array({nested})}};
    j = small_json();
    j[section] = nested;
    e = error_of(j);
    EXPECT_TRUE(has(e, "limits.json") && has(e, std::string("key '") + section) &&
                has(e, "Sequences nested deeper than 16 levels"))
        << e;
  }
  j = small_json();
  json nested = nullptr;
  for (int i = 0; i < 40; ++i)
    nested = {{"type", "Sequence"}, {"processors", json::array({nested})}};
  j["post_processor"] = nested;
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'post_processor") && has(e, "Sequences nested deeper than 16 levels"))
      << e;
  // 1,000 pre-tokenizers in one Sequence.
  j = small_json();
  j["pre_tokenizer"] = sequence_of({{"type", "Digits"}}, 1000);
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'pre_tokenizer.pretokenizers[64]'") && has(e, "more than 64 steps")) << e;
}

TEST(TokenizerLimits, StepsThatMultiplyTheTextAreRefused) {
  // Each ByteLevel re-encodes the bytes of the one before it, doubling non-ASCII text.
  json j = small_json();
  j["pre_tokenizer"] =
      sequence_of({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}, 60);
  std::string e = error_of(j);
  EXPECT_TRUE(has(e, "limits.json") && has(e, "key 'pre_tokenizer'") &&
              has(e, "over 1024 times longer"))
      << e;
  // Two of them are bounded and run.
  j["pre_tokenizer"] =
      sequence_of({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}, 2);
  auto t = retnet::make_hf_tokenizer(j.dump(), "limits.json");
  EXPECT_FALSE(t->encode("ab\xC3\xA9").empty());
  // Replace steps that each lengthen the text tenfold.
  j = small_json();
  json steps = json::array();
  for (int i = 0; i < 4; ++i)
    steps.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "aaaaaaaaaa"}});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", steps}};
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'normalizer'") && has(e, "over 1024 times longer")) << e;
  j = small_json();
  j["decoder"] = {{"type", "Sequence"}, {"decoders", steps}};
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'decoder'") && has(e, "over 1024 times longer")) << e;
}

TEST(TokenizerLimits, IdsMustFitTheEntriesAndBeUnique) {
  json j = small_json();
  j["model"]["vocab"]["b"] = 100'000'000;
  std::string e = error_of(j);
  EXPECT_TRUE(has(e, "limits.json") && has(e, "key 'model.vocab.b'") &&
              has(e, "id 100000000 is out of range") && has(e, "may not exceed 65543"))
      << e;
  j = small_json();
  j["added_tokens"][0]["id"] = 100'000'000;
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'added_tokens[0].id'") &&
              has(e, "id 100000000 of '<|end|>' is out of range"))
      << e;
  // Sparse but near the entries: loads.
  j = small_json();
  j["added_tokens"][0]["id"] = 1000;
  EXPECT_EQ(error_of(j), "");
  j = small_json();
  j["model"]["vocab"]["ab"] = 1;
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'model.vocab.") && has(e, "id 1 is also the id of '")) << e;
  j = small_json();
  j["added_tokens"][0]["id"] = 2;
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'added_tokens[0].id'") &&
              has(e, "id 2 of '<|end|>' is also the id of 'ab'"))
      << e;
  j = small_json();
  j["added_tokens"].push_back({{"id", 4}, {"content", "<|x|>"}});
  j["added_tokens"].push_back({{"id", 4}, {"content", "<|y|>"}});
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'added_tokens[2].id'") &&
              has(e, "id 4 of '<|y|>' is also the id of '<|x|>'"))
      << e;
  j = small_json();
  j["added_tokens"].push_back({{"id", 3}, {"content", "<|end|>"}});
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'added_tokens[1].id'") && has(e, "'<|end|>' is listed twice with id 3"))
      << e;
  // An added token restating its vocabulary entry is how real files spell special tokens.
  j = small_json();
  j["added_tokens"][0] = {{"id", 2}, {"content", "ab"}, {"special", true}};
  EXPECT_EQ(error_of(j), "");
  j = small_json();
  j["model"]["vocab"] = json::object();
  e = error_of(j);
  EXPECT_TRUE(has(e, "key 'model.vocab'") && has(e, "empty")) << e;
}

// A model directory's config.json: its bos / eos ids must be ids of its vocabulary.
std::string config_error_of(const std::string& ids) {
  const std::string text =
      R"({"model_type": "retnet", "hidden_size": 64, "num_heads": 2, "num_hidden_layers": 1,
      "hidden_ratio": 2, "expand_k": 1, "expand_v": 2, "vocab_size": 100)" +
      ids + "}";
  try {
    retnet::parse_hf_config(text, "dir/config.json");
  } catch (const retnet::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerLimits, ModelSpecialTokenIdsAreIdsOfTheVocabulary) {
  EXPECT_EQ(config_error_of(R"(, "bos_token_id": 1, "eos_token_id": [2, 99], "pad_token_id": -1)"),
            "");
  EXPECT_EQ(config_error_of(R"(, "bos_token_id": null)"), "");
  const auto h = retnet::parse_hf_config(
      R"({"hidden_size": 64, "num_heads": 2, "num_hidden_layers": 1, "vocab_size": 100, "eos_token_id": [7, 2]})",
      "c.json");
  EXPECT_EQ(h.eos_id, 7);
  EXPECT_EQ(h.bos_id, -1);
  std::string e = config_error_of(R"(, "bos_token_id": "<s>")");
  EXPECT_TRUE(
      has(e, "dir/config.json: 'bos_token_id' must be a token id (an integer), got \"<s>\""))
      << e;
  e = config_error_of(R"(, "eos_token_id": 100)");
  EXPECT_TRUE(
      has(e, "dir/config.json: 'eos_token_id' = 100 is outside the vocabulary of 100 tokens"))
      << e;
  e = config_error_of(R"(, "eos_token_id": [2, 5000])");
  EXPECT_TRUE(has(e, "'eos_token_id[1]' = 5000 is outside the vocabulary of 100 tokens")) << e;
  e = config_error_of(R"(, "eos_token_id": [2, "x"])");
  EXPECT_TRUE(has(e, "'eos_token_id[1]' must be a token id")) << e;
  e = config_error_of(R"(, "bos_token_id": -1)");
  EXPECT_TRUE(has(e, "'bos_token_id' = -1 is outside the vocabulary")) << e;
}

}  // namespace tokenizer_limits_test
