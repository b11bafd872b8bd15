#pragma once
// A small SentencePiece tokenizer for tests: 400 pieces trained on the first 200 KB of the bundled
// corpus. ctest runs every test in its own process, so the model is kept in the temp directory
// (written atomically) and trained only by the first test that needs it; the file name carries the
// test binary's modification time, so a rebuilt engine (other training settings) trains anew.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "retnet/core/safetensors.h"
#include "retnet/text/tokenizer.h"
#include "retnet/text/tokenizer_training.h"

namespace retnet::test {

inline std::string corpus_prefix(size_t bytes) {
  std::ifstream in(std::string(RETNET_TEST_DATA) + "/../../data/tinyshakespeare.txt",
                   std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.substr(0, bytes);
}

// Path of the test tokenizer's .model file.
inline std::string test_tokenizer_path(int64_t vocab = 400, const std::string& type = "unigram") {
  namespace fs = std::filesystem;
  const auto built = fs::last_write_time("/proc/self/exe").time_since_epoch().count();
  const fs::path model =
      fs::temp_directory_path() / ("retnet_test_tokenizer_" + type + std::to_string(vocab) + "_" +
                                   std::to_string(built) + ".model");
  std::error_code ec;
  if (fs::exists(model, ec)) {
    try {
      load_tokenizer(model.string());
      return model.string();
    } catch (...) {  // damaged by someone: train again
    }
  }
  const fs::path text = fs::temp_directory_path() /
                        ("retnet_test_tokenizer_text_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(text, std::ios::binary) << corpus_prefix(200000);
  SentencePieceTrainOptions o;
  o.data = text.string();
  o.vocab_size = vocab;
  o.model_type = type;
  const std::string bytes = train_sentencepiece(o);
  fs::remove(text);
  write_file_atomically(model.string(), bytes);
  // Models of earlier builds are of no further use.
  const std::string prefix = "retnet_test_tokenizer_" + type + std::to_string(vocab) + "_";
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && e.path() != model) fs::remove(e.path(), ec);
  }
  return model.string();
}

}  // namespace retnet::test
