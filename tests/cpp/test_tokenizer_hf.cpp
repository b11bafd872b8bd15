// Hugging Face tokenizer.json files (make_hf_tokenizer): small hand-written SentencePiece-style
// and byte-level BPE models, the split patterns, Unicode normalizers, added tokens, serialization,
// loading from a path or a directory, and files it must refuse with an Error naming the file and
// the key. Parity with Hugging Face's own JavaScript port on trained vocabularies is
// tests/js/tokenizer_parity.mjs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/error.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/model.h"
#include "retnet/text/tokenizer.h"
#include "test_helpers.h"

using namespace retnet;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSp = "\xE2\x96\x81";  // ▁

// Llama-2 layout: <unk> <s> </s>, byte pieces 3..258, then a few pieces and merges.
json sentencepiece_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int id = 259;
  for (const std::string& t :
       std::vector<std::string>{kSp, "a", "b", "c", "ab", kSp + "ab", kSp + kSp, kSp + "c"})
    vocab[t] = id++;
  auto special = [](const char* content, int i) {
    return json{{"id", i},         {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  return {
      {"added_tokens", {special("<unk>", 0), special("<s>", 1), special("</s>", 2)}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", kSp}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"fuse_unk", true},
        {"vocab", vocab},
        {"merges", std::vector<std::string>{"a b", kSp + " ab", kSp + " " + kSp, kSp + " c"}}}}};
}

// GPT-2 layout over a few byte-level characters: "Ġ" is the space.
json byte_level_json(const std::string& pre = "gpt2") {
  const std::string g = "\xC4\xA0";  // Ġ
  json vocab;
  int id = 0;
  for (const std::string& t :
       std::vector<std::string>{"a", "b", "1", "2", "3", "'", "s", "!", g, "\xC4\x8A" /* Ċ */, "ab",
                                g + "ab", g + g, g + "!", "12", "123"})
    vocab[t] = id++;
  json pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  if (pre == "llama3")
    pre_tokenizer = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  return {{"added_tokens",
           {{{"id", 100}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}},
            {{"id", 101},
             {"content", "<fim>"},
             {"special", false},
             {"lstrip", true},
             {"rstrip", true},
             {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", json::array({json::array({"a", "b"}), json::array({g, "ab"}),
                                    json::array({g, g}), json::array({g, "!"}),
                                    json::array({"1", "2"}), json::array({"12", "3"})})}}}};
}

std::unique_ptr<Tokenizer> make(const json& j) { return make_hf_tokenizer(j.dump(), "test.json"); }

std::vector<std::string> pieces(const Tokenizer& t, const std::string& text) {
  std::vector<std::string> out;
  for (int32_t id : t.encode(text)) out.push_back(t.token_bytes(id));
  return out;
}

std::string tokenizer_error_of(const json& j) {
  try {
    make(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(TokenizerHf, SentencePieceStyleMergesAndByteFallback) {
  auto t = make(sentencepiece_json());
  EXPECT_EQ(t->kind(), "hf");
  EXPECT_EQ(t->vocab_size(), 267);
  EXPECT_EQ(pieces(*t, "ab ab"), (std::vector<std::string>{" ab", " ab"}));
  EXPECT_EQ(pieces(*t, "c  c"), (std::vector<std::string>{" c", "  ", "c"}));
  // "\n" and "é" are not pieces: their UTF-8 bytes are.
  EXPECT_EQ(pieces(*t, "a\n\xC3\xA9"), (std::vector<std::string>{" ", "a", "\n", "\xC3", "\xA9"}));
  for (const std::string text : {"ab ab", "c  c", "a\n\xC3\xA9 b", "  two leading", "x"})
    EXPECT_EQ(t->decode(t->encode(text)), text) << text;
}

TEST(TokenizerHf, UnknownCharactersWithoutBytePiecesFuseIntoOneUnk) {
  json j = sentencepiece_json();
  for (int b = 0; b < 256; ++b) j["model"]["vocab"].erase(fmt::format("<0x{:02X}>", b));
  j["model"]["byte_fallback"] = false;
  auto t = make(j);
  EXPECT_EQ(t->encode("xyz"), (std::vector<int32_t>{259, 0}));  // ▁, one <unk> for x y z
}

TEST(TokenizerHf, MergesAsStringsOrPairsAreTheSame) {
  json pairs = sentencepiece_json();
  json list = json::array();
  for (const auto& m : pairs["model"]["merges"]) {
    const std::string s = m;
    list.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  pairs["model"]["merges"] = list;
  EXPECT_EQ(make(pairs)->encode("ab c ab  c"), make(sentencepiece_json())->encode("ab c ab  c"));
}

TEST(TokenizerHf, SpecialTokensBosEosAndTemplate) {
  auto t = make(sentencepiece_json());
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->adds_bos());
  // Added tokens are matched on the raw text, before the normalizer.
  EXPECT_EQ(t->encode("<s>ab</s>"), (std::vector<int32_t>{1, 264, 2}));
  EXPECT_EQ(t->decode({1, 264, 2}), "<s> ab</s>");
  auto b = make(byte_level_json());
  EXPECT_EQ(b->eos_id(), 100);
  EXPECT_FALSE(b->adds_bos());
}

TEST(TokenizerHf, MetaspacePreTokenizerSchemes) {
  json j = sentencepiece_json();
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "first"}, {"split", true}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "first"}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}}}}};
  auto t = make(j);
  EXPECT_EQ(pieces(*t, "ab ab"), (std::vector<std::string>{" ab", " ab"}));
  // "first": no prefix after a special token at the start.
  EXPECT_EQ(pieces(*t, "<s>ab"), (std::vector<std::string>{"<s>", "ab"}));
  EXPECT_EQ(t->decode(t->encode("ab  c")), "ab  c");
  j["pre_tokenizer"]["prepend_scheme"] = "never";
  EXPECT_EQ(pieces(*make(j), "ab"), (std::vector<std::string>{"ab"}));
  // No prefix, no split: a word whose "▁" follows a one-byte character is cut before it.
  j["pre_tokenizer"]["split"] = false;
  EXPECT_EQ(pieces(*make(j), "a b ab"), (std::vector<std::string>{"a", " ", "b", " ab"}));
}

TEST(TokenizerHf, ByteLevelGpt2Split) {
  auto t = make(byte_level_json());
  // "a   ab": a, "  " (\s+(?!\S) leaves the last space to " ab"), " ab".
  EXPECT_EQ(pieces(*t, "a   ab"), (std::vector<std::string>{"a", "  ", " ab"}));
  EXPECT_EQ(pieces(*t, "ab's!"), (std::vector<std::string>{"ab", "'", "s", "!"}));
  EXPECT_EQ(pieces(*t, "123123 !"), (std::vector<std::string>{"123", "123", " !"}));
  EXPECT_EQ(t->decode(t->encode("ab ab\n")), "ab ab\n");
  EXPECT_EQ(t->token_bytes(9), "\n");  // Ċ
}

TEST(TokenizerHf, ByteLevelLlama3Split) {
  auto t = make(byte_level_json("llama3"));
  // Digits in groups of three ("312" "3"; GPT-2 keeps "3123" whole and merges "123").
  EXPECT_EQ(pieces(*t, "3123"), (std::vector<std::string>{"3", "12", "3"}));
  EXPECT_EQ(pieces(*make(byte_level_json()), "3123"), (std::vector<std::string>{"3", "123"}));
  EXPECT_EQ(pieces(*t, "!ab  ab"), (std::vector<std::string>{"!", "ab", " ", " ab"}));
  EXPECT_EQ(t->decode(t->encode("ab\n\n  ab")), "ab\n\n  ab");
}

TEST(TokenizerHf, AddedTokensStripTheirNeighbours) {
  auto t = make(byte_level_json());
  EXPECT_EQ(t->encode("a  <fim>  b"), (std::vector<int32_t>{0, 101, 1}));
  EXPECT_EQ(t->encode("a<|endoftext|> b"), (std::vector<int32_t>{0, 100, 8, 1}));
}

// A whitespace run 16x longer takes about 16x longer to encode (a quadratic split would take
// 256x): a ratio measured in one run, so the machine's speed and load matter little.
TEST(TokenizerHf, LongWhitespaceRunsAreLinear) {
  auto t = make(byte_level_json());
  auto run = [](size_t spaces) { return "a" + std::string(spaces, ' ') + "b"; };
  auto best_seconds = [&](const std::string& text, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = t->encode(text);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      EXPECT_EQ(t->decode(ids), text);
    }
    return best;
  };
  const std::string text = run(1 << 20);
  // 16 times the spaces: about 16 times the time if linear, 256 if quadratic. On a busy machine
  // one measurement can be preempted, so up to three tries, of which one must stay under 64.
  double small = 0, large = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    small = best_seconds(run(1 << 16), 5);
    large = best_seconds(text, 3);
    if (large / std::max(small, 1e-6) < 64.0) break;
  }
  EXPECT_LT(large / std::max(small, 1e-6), 64.0) << small << " s for 2^16 spaces, " << large
                                                  << " s for 2^20";
  auto sp = make(sentencepiece_json());
  EXPECT_EQ(sp->decode(sp->encode(text)), text);
}

TEST(TokenizerHf, SerializesIntoModelMetadataAndLoadsFromPaths) {
  const std::string text = sentencepiece_json().dump();
  auto t = make_hf_tokenizer(text, "x");
  EXPECT_EQ(t->serialize(), text);
  auto back = tokenizer_from_metadata(tokenizer_metadata(*t), "model.safetensors");
  EXPECT_EQ(back->kind(), "hf");
  EXPECT_EQ(back->encode("ab c"), t->encode("ab c"));
  EXPECT_EQ(tokenizer_fingerprint(*back), tokenizer_fingerprint(*t));
  const fs::path dir = fs::temp_directory_path() / fmt::format("retnet_hf_{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << text;
  EXPECT_EQ(load_tokenizer(dir.string())->encode("ab"), t->encode("ab"));
  EXPECT_EQ(load_tokenizer((dir / "tokenizer.json").string())->encode("ab"), t->encode("ab"));
  fs::remove(dir / "tokenizer.json");
  EXPECT_THROW(load_tokenizer(dir.string()), Error);
  fs::remove_all(dir);
}

TEST(TokenizerHf, InvalidUtf8IsAnError) {
  auto t = make(byte_level_json());
  EXPECT_TRUE(t->reads_utf8_only());
  EXPECT_THROW(t->encode("ab\xFF"), Error);
  EXPECT_THROW(t->token_bytes(102), Error);
  EXPECT_THROW(t->decode({-1}), Error);
}

// Unicode normalizers on the 256-byte vocabulary (byte b is id b): the ids are the bytes of the
// normalized text. Parity with Hugging Face's own: tests/js/tokenizer_parity.mjs.
TEST(TokenizerHf, UnicodeNormalizationForms) {
  auto with = [](const json& normalizer) {
    json j = json::parse(byte_level_tokenizer_json());
    j["normalizer"] = normalizer;
    return make(j);
  };
  auto normalized = [&](const char* form, const std::string& text) {
    auto t = with({{"type", form}});
    return t->decode(t->encode(text));
  };
  const std::string e_acute = "\xC3\xA9", e_combining = "e\xCC\x81", fi = "\xEF\xAC\x81";
  const std::string fullwidth_12 = "\xEF\xBC\x91\xEF\xBC\x92";
  EXPECT_EQ(normalized("NFC", e_combining + " " + fi), e_acute + " " + fi);
  EXPECT_EQ(normalized("NFD", e_acute), e_combining);
  EXPECT_EQ(normalized("NFKC", fi + " " + fullwidth_12 + " " + e_combining), "fi 12 " + e_acute);
  EXPECT_EQ(normalized("NFKD", fi + e_acute), "fi" + e_combining);
  EXPECT_EQ(normalized("NFC", ""), "");
  // In a Sequence with the other steps; an added token marked "normalized" matches the normalized
  // text, one that is not matches the raw text.
  json j = json::parse(byte_level_tokenizer_json());
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "NFKC"}},
                       {{"type", "Replace"}, {"pattern", {{"String", "fi"}}}, {"content", "F"}}}}};
  j["added_tokens"] = {{{"id", 256}, {"content", fi + "x"}, {"normalized", true}},
                       {{"id", 257}, {"content", e_combining}, {"normalized", false}}};
  auto t = make(j);
  EXPECT_EQ(t->encode("Fx " + fi + "x"), (std::vector<int32_t>{256, ' ', 256}));
  EXPECT_EQ(t->encode(e_combining + e_acute), (std::vector<int32_t>{257, 0xC3, 0xA9}));
  // Text longer than the pieces ICU is given (kPiece, 2^20 bytes) normalizes across the cut: a
  // combining mark is the first byte past the first piece here.
  std::string text;
  text.reserve((size_t{1} << 20) + 4);
  while (text.size() + 2 < (size_t{1} << 20)) text += "a ";
  text += "a" + e_combining + "b";
  ASSERT_EQ(text.find("\xCC"), (size_t{1} << 20));
  const std::vector<int32_t> ids = with({{"type", "NFC"}})->encode(text);
  ASSERT_EQ(ids.size(), text.size() - 1);
  EXPECT_EQ(std::vector<int32_t>(ids.end() - 3, ids.end()),
            (std::vector<int32_t>{0xC3, 0xA9, 'b'}));
}

TEST(TokenizerHf, RefusesWhatItDoesNotRunNamingFileAndKey) {
  auto expect_error = [](const json& j, const std::string& key) {
    const std::string what = tokenizer_error_of(j);
    EXPECT_NE(what.find("test.json"), std::string::npos) << what;
    EXPECT_NE(what.find(key), std::string::npos) << what;
  };
  EXPECT_NE(tokenizer_error_of(json()).find("test.json"), std::string::npos);
  EXPECT_THROW(make_hf_tokenizer("{\"model\": ", "test.json"), Error);
  json j = sentencepiece_json();
  j["model"]["type"] = "WordPiece";
  expect_error(j, "model.type");
  j = sentencepiece_json();
  j["model"].erase("vocab");
  expect_error(j, "model.vocab");
  j = sentencepiece_json();
  j["model"].erase("merges");
  expect_error(j, "model.merges");
  j = sentencepiece_json();
  j["model"]["merges"].push_back("a zz");
  expect_error(j, "model.merges");
  j = sentencepiece_json();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_error(j, "normalizer");
  j = sentencepiece_json();  // cutting or padding a text is refused, never ignored
  j["truncation"] = {{"direction", "Right"}, {"max_length", 512}, {"strategy", "LongestFirst"}};
  expect_error(j, "truncation");
  EXPECT_NE(tokenizer_error_of(j).find("512"), std::string::npos) << tokenizer_error_of(j);
  j = sentencepiece_json();
  j["padding"] = {{"strategy", "BatchLongest"}, {"pad_id", 0}, {"pad_token", "<unk>"}};
  expect_error(j, "padding");
  j = sentencepiece_json();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_error(j, "pre_tokenizer");
  j = sentencepiece_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, "decoder");
  j = byte_level_json("llama3");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  expect_error(j, "pre_tokenizer.pretokenizers[0].pattern.Regex");
  j = byte_level_json();
  j["added_tokens"][0]["single_word"] = true;
  expect_error(j, "added_tokens[0].single_word");
  j = byte_level_json();
  j["model"]["vocab"]["a"] = "zero";
  expect_error(j, "model.vocab.a");
}

TEST(TokenizerHf, CliEncodesAndDecodesWithADirectory) {
  const fs::path dir = test::fresh_temp_dir("hf_cli");
  std::ofstream(dir / "tokenizer.json") << sentencepiece_json().dump();
  auto enc = test::run_retnet("tokenizer encode --tokenizer " + dir.string() +
                              " --text 'ab c\xC3\xA9' --add-bos --stats");
  ASSERT_EQ(enc.exit_code, 0) << enc.err;
  EXPECT_EQ(enc.out, "1,264,266,198,172\n");  // <s> ▁ab ▁c <0xC3> <0xA9>
  EXPECT_NE(enc.err.find("MB/s"), std::string::npos) << enc.err;
  std::ofstream(dir / "ids.txt") << enc.out;
  auto dec = test::run_retnet("tokenizer decode --tokenizer " + (dir / "tokenizer.json").string() +
                              " --file " + (dir / "ids.txt").string());
  ASSERT_EQ(dec.exit_code, 0) << dec.err;
  EXPECT_EQ(dec.out, "<s> ab c\xC3\xA9\n");
  std::ofstream(dir / "bad.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
  auto bad = test::run_retnet("tokenizer encode --tokenizer " + (dir / "bad.json").string() +
                              " --text hi");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("model.type"), std::string::npos) << bad.err;
  auto help = test::run_retnet("tokenizer encode --help");
  EXPECT_NE(help.out.find("tokenizer.json"), std::string::npos) << help.out;
  fs::remove_all(dir);
}

// `retnet generate` on a directory tokenizes a prompt as Hugging Face does: the BOS the
// tokenizer.json's template puts first, then the text; --no-bos and --state-in leave it out.
TEST(TokenizerHf, GenerateFromADirectoryPutsTheTemplateBosFirst) {
  const fs::path dir = test::fresh_temp_dir("hf_bos");
  const Model model = Model::init(test::model_config(16, 32, 2, 32, 1, 267), 5);
  save_hf_directory(model, dir.string(), HfFlavour::Syncdoth, "f32",
                    {{"tokenizer.json", sentencepiece_json().dump()}}, 1, 2);
  const int64_t text_tokens = static_cast<int64_t>(make(sentencepiece_json())->encode("ab c").size());
  auto prompt_tokens = [&](const std::string& extra) {
    const auto r = test::run_retnet("generate -m " + dir.string() +
                                    " -p 'ab c' -n 0 --json " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out).at("prompt_tokens").get<int64_t>();
  };
  EXPECT_EQ(prompt_tokens(""), text_tokens + 1);
  EXPECT_EQ(prompt_tokens("--no-bos"), text_tokens);
  fs::remove_all(dir);
}
