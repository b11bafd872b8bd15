#pragma once
// What every harness shares: inputs written to files for loaders that take a path, a tiny model
// for the loaders that check against one, and what counts as a clean rejection.
//
// A retnet::Error is the engine's way to refuse bad input, so a harness catches it and nothing
// else: any other exception (std::out_of_range, nlohmann's type_error, ...) escapes, aborts and
// is a finding, as it would be an "internal error" for a user.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "retnet/core/error.h"
#include "retnet/model/config.h"
#include "retnet/model/model.h"

namespace retnet::fuzz {

// A directory of this process's own under the temporary directory, made once.
inline const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("retnet_fuzz_" + std::to_string(getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = (work_dir() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A model small enough for the fuzzer to mutate whole files of (one retention layer of width 32,
// 64 tokens) and wide enough for every weight type (rows of 32 values: one quantised block).
inline Config tiny_config() {
  return Config::from_json(R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 32,
                               "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 64,
                               "decoder_layers": 1, "vocab_size": 64})",
                           "the fuzzers' tiny config");
}

inline const Model& tiny_model() {
  static const Model model = Model::init(tiny_config(), 1);
  return model;
}

// RETNET_FUZZ_WRITE_SEEDS=DIR: a harness whose seeds are made by the engine (model files, state
// files, checkpoints) writes them into DIR at start-up (scripts/fuzz.sh --write-seeds), so that
// the corpus in the repository is the engine's own output, not hand-made bytes.
inline const char* seed_dir() { return std::getenv("RETNET_FUZZ_WRITE_SEEDS"); }

inline void write_seed(const std::string& name, std::string_view bytes) {
  std::ofstream((std::filesystem::path(seed_dir()) / name).string(), std::ios::binary)
      .write(bytes.data(), bytes.size());
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class F>
void rejecting_errors(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace retnet::fuzz
