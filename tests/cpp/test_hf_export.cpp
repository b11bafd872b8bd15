// `retnet export`'s tokenizer and generation files: a byte-level model's tokenizer.json encodes as
// the engine does, generation_config.json is an object, tokenizer_config.json holds the special
// tokens and the chat template, a directory's own files travel unchanged, and the exported
// directory generates as the model it came from. Hugging Face's own readers:
// tests/js/export_parity.mjs and tests/python/check_hf_export.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/read_file.h"
#include "retnet/retnet.h"
#include "test_helpers.h"

using namespace retnet;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// UTF-8 texts a byte-level tokenizer.json must encode byte for byte: ASCII controls and spaces,
// combining marks, compatibility characters, full-width digits, CJK, emoji, chat markup.
std::vector<std::string> export_texts() {
  std::string ascii;
  for (int c = 1; c < 128; ++c) ascii += static_cast<char>(c);
  return {"",
          "Hello, world!",
          "  two  spaces\n\ttab\r\n",
          "e\xCC\x81 caf\xC3\xA9 \xEF\xAC\x81 \xEF\xBC\x91\xEF\xBC\x92",
          "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82",
          "<|user|>\nhi<|end|>\n",
          ascii};
}

// A byte-level BPE tokenizer.json with one merge and an end-of-text token (id 257).
std::string gpt2_style_json() {
  json vocab = json::parse(byte_level_tokenizer_json())["model"]["vocab"];  // GPT-2's bytes
  vocab["he"] = 256;
  return json{{"added_tokens",
               {{{"id", 257},
                 {"content", "<|endoftext|>"},
                 {"single_word", false},
                 {"lstrip", false},
                 {"rstrip", false},
                 {"normalized", false},
                 {"special", true}}}},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"h e"}}}}}
      .dump();
}

json read_json(const fs::path& p) { return json::parse(read_file(p.string(), "test file")); }

bool has_null(const json& j) {
  if (j.is_null()) return true;
  if (!j.is_structured()) return false;  // iterating a value visits the value itself
  for (const auto& v : j)
    if (has_null(v)) return true;
  return false;
}

// Greedy generation's tokens and text (`retnet generate --json`).
json greedy(const std::string& model) {
  const auto r =
      test::run_retnet("generate -m " + model + " -p 'Hello there' -n 6 --temp 0 -s 1 --json", 300);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json();
}

}  // namespace

TEST(HfExport, ByteLevelTokenizerJsonEncodesEveryByteAsItsId) {
  const auto bytes = make_byte_tokenizer();
  const auto hf = make_hf_tokenizer(byte_level_tokenizer_json(), "byte-level tokenizer.json");
  EXPECT_EQ(hf->vocab_size(), 256);
  for (const std::string& text : export_texts()) {
    EXPECT_EQ(hf->encode(text), bytes->encode(text)) << text;
    EXPECT_EQ(hf->decode(bytes->encode(text)), text);
  }
  // The exact text reads back as the byte-level tokenizer itself (any bytes, the same
  // fingerprint); a reformatted copy as the tokenizer.json it is.
  const fs::path dir = test::fresh_temp_dir("byte_json");
  const auto same = load_tokenizer(test::write_file(dir / "t.json", byte_level_tokenizer_json()));
  EXPECT_EQ(same->kind(), "bytes");
  EXPECT_EQ(tokenizer_fingerprint(*same), tokenizer_fingerprint(*bytes));
  const std::string compact = json::parse(byte_level_tokenizer_json()).dump();
  const auto other = load_tokenizer(test::write_file(dir / "u.json", compact));
  EXPECT_EQ(other->kind(), "hf");
  EXPECT_EQ(other->encode("abc"), bytes->encode("abc"));
  fs::remove_all(dir);
}

TEST(HfExport, ByteModelExportsTokenizerAndGenerationFilesInBothLayouts) {
  const fs::path dir = test::fresh_temp_dir("hf_export_files");
  const std::string model = (dir / "m.safetensors").string();
  for (const char* layout : {"syncdoth", "fla"}) {
    SCOPED_TRACE(layout);
    const bool fla = std::string(layout) == "fla";
    Config c = test::model_config(32, 64, 4, 64, 2, 256);
    if (fla) c = test::fla_conventions(c);
    save_model(Model::init(c, 7), model);
    const fs::path out = dir / layout;
    const auto r =
        test::run_retnet("export " + model + " --format " + layout + " -o " + out.string(), 300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* name : {"config.json", "model.safetensors", "generation_config.json",
                             "tokenizer.json", "tokenizer_config.json"})
      EXPECT_TRUE(fs::exists(out / name)) << name;
    EXPECT_FALSE(fs::exists(out / "tokenizer.model"));
    const json gen = read_json(out / "generation_config.json");
    EXPECT_TRUE(gen.is_object()) << gen.dump();
    EXPECT_FALSE(has_null(gen)) << gen.dump();
    EXPECT_EQ(read_file((out / "tokenizer.json").string(), "test"), byte_level_tokenizer_json());
    const json tc = read_json(out / "tokenizer_config.json");
    ASSERT_TRUE(tc.is_object());
    EXPECT_EQ(tc.value("chat_template", ""), default_chat_template());
    EXPECT_EQ(tc.value("tokenizer_class", ""), "PreTrainedTokenizerFast");
    EXPECT_FALSE(has_null(tc)) << tc.dump();
    // Read back: the byte-level tokenizer, and the same greedy tokens and text.
    EXPECT_EQ(load_model_tokenizer(out.string())->kind(), "bytes");
    const json a = greedy(model), b = greedy(out.string());
    EXPECT_EQ(a.value("text", "?"), b.value("text", "!"));
    EXPECT_EQ(a.dump(), b.dump());
    for (const auto& [from, npy] : {std::pair{model, dir / "a.npy"}, {out.string(), dir / "b.npy"}})
      ASSERT_EQ(
          test::run_retnet("logits -m " + from + " --tokens 72,105,0,255 -o " + npy.string(), 300)
              .exit_code,
          0);
    EXPECT_EQ(read_file((dir / "a.npy").string(), "test"),
              read_file((dir / "b.npy").string(), "test"));
  }
  // The help says what is written.
  const auto help = test::run_retnet("export --help");
  for (const char* name : {"generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "tokenizer.model", "chat template"})
    EXPECT_NE(help.out.find(name), std::string::npos) << name;
  fs::remove_all(dir);
}

TEST(HfExport, ModelFileWithATokenizerJsonExportsItAndItsIds) {
  const fs::path dir = test::fresh_temp_dir("hf_export_tok");
  const std::string model = (dir / "m.safetensors").string();
  const auto tok = make_hf_tokenizer(gpt2_style_json(), "gpt2-style");
  save_model(Model::init(test::model_config(16, 32, 2, 32, 1, 258), 3), model,
             tokenizer_metadata(*tok));
  const fs::path out = dir / "out";
  const auto r = test::run_retnet("export " + model + " --format syncdoth -o " + out.string(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file((out / "tokenizer.json").string(), "test"), gpt2_style_json());
  const json gen = read_json(out / "generation_config.json");
  EXPECT_EQ(gen.value("eos_token_id", -1), 257) << gen.dump();
  EXPECT_FALSE(gen.contains("bos_token_id")) << gen.dump();
  EXPECT_EQ(read_json(out / "config.json").value("eos_token_id", -1), 257);
  const json tc = read_json(out / "tokenizer_config.json");
  EXPECT_EQ(tc.value("eos_token", ""), "<|endoftext|>");
  EXPECT_EQ(tc.value("add_bos_token", true), false);
  const auto back = load_model_tokenizer(out.string());
  EXPECT_EQ(back->encode("hello <|endoftext|>"), tok->encode("hello <|endoftext|>"));
  fs::remove_all(dir);
}

TEST(HfExport, DirectoryKeepsItsOwnTokenizerFilesAndGetsWhatItLacks) {
  const fs::path dir = test::fresh_temp_dir("hf_export_dir");
  const Model model = Model::init(test::model_config(16, 32, 2, 32, 1, 258), 4);
  const std::string own_config = R"({"chat_template": "{{ messages[0]['content'] }}"})";
  const fs::path src = dir / "src";
  save_hf_directory(model, src.string(), HfFlavour::Syncdoth, "f32",
                    {{"tokenizer.json", gpt2_style_json()},
                     {"tokenizer_config.json", own_config},
                     {"special_tokens_map.json", "{}"},
                     {"chat_template.jinja", "{{ 'x' }}"}},
                    -1, 257, 257);
  const fs::path out = dir / "out";
  auto r =
      test::run_retnet("export " + src.string() + " --format syncdoth -o " + out.string(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file((out / "tokenizer_config.json").string(), "test"), own_config);
  EXPECT_EQ(read_file((out / "chat_template.jinja").string(), "test"), "{{ 'x' }}");
  EXPECT_EQ(read_file((out / "special_tokens_map.json").string(), "test"), "{}");
  const json gen = read_json(out / "generation_config.json");
  EXPECT_EQ(gen, json::parse(R"({"eos_token_id": 257, "pad_token_id": 257})"));
  // Without a tokenizer_config.json, one is written with the template the engine uses (here
  // chat_template.jinja's).
  fs::remove(src / "tokenizer_config.json");
  const fs::path out2 = dir / "out2";
  r = test::run_retnet("export " + src.string() + " --format syncdoth -o " + out2.string(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json tc = read_json(out2 / "tokenizer_config.json");
  EXPECT_EQ(tc.value("chat_template", ""), "{{ 'x' }}");
  EXPECT_EQ(tc.value("eos_token", ""), "<|endoftext|>");
  // A tokenizer the engine does not run is still copied; no config is written for it.
  const std::string unigram = R"({"model": {"type": "Unigram", "vocab": []}})";
  test::write_file(src / "tokenizer.json", unigram);
  const fs::path out3 = dir / "out3";
  r = test::run_retnet("export " + src.string() + " --format syncdoth -o " + out3.string(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file((out3 / "tokenizer.json").string(), "test"), unigram);
  EXPECT_FALSE(fs::exists(out3 / "tokenizer_config.json"));
  EXPECT_NE(r.err.find("no tokenizer_config.json written"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("model.type"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// A model file that records no tokenizer and whose vocabulary is not the 256 bytes (a torchscale
// export) gets no tokenizer files, with a note; its generation_config.json is "{}".
TEST(HfExport, ModelWithoutATokenizerGetsNoTokenizerFiles) {
  const fs::path dir = test::fresh_temp_dir("hf_export_none");
  const std::string model = (dir / "m.safetensors").string();
  save_model(Model::init(test::model_config(16, 32, 2, 32, 1, 300), 3), model);
  const fs::path out = dir / "out";
  const auto r = test::run_retnet("export " + model + " --format syncdoth -o " + out.string(), 300);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("no tokenizer files written"), std::string::npos) << r.err;
  for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json"})
    EXPECT_FALSE(fs::exists(out / name)) << name;
  EXPECT_EQ(read_file((out / "generation_config.json").string(), "test"), "{}\n");
  fs::remove_all(dir);
}

// `init --format` writes what `export` writes for a byte-level model: the tokenizer files, so the
// directory runs on its own; another vocabulary gets none, with a note.
TEST(HfExport, InitWritesTheByteLevelTokenizerFiles) {
  const fs::path dir = test::fresh_temp_dir("hf_init_files");
  const fs::path config = dir / "c.json", out = dir / "out";
  for (int64_t vocab : {256, 300}) {
    SCOPED_TRACE(vocab);
    std::ofstream(config) << test::model_config(16, 32, 2, 32, 1, vocab).to_json();
    fs::remove_all(out);
    const auto r = test::run_retnet("init --config " + config.string() +
                                        " --format syncdoth -o " + out.string(),
                                    300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(fs::exists(out / "tokenizer.json"), vocab == 256);
    EXPECT_EQ(fs::exists(out / "tokenizer_config.json"), vocab == 256);
    if (vocab == 256) {
      EXPECT_EQ(read_file((out / "tokenizer.json").string(), "test"), byte_level_tokenizer_json());
      EXPECT_EQ(load_model_tokenizer(out.string())->kind(), "bytes");
    } else {
      EXPECT_NE(r.err.find("no tokenizer files written"), std::string::npos) << r.err;
    }
  }
  fs::remove_all(dir);
}
