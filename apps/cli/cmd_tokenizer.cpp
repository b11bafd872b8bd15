// `retnet tokenizer`: train a SentencePiece tokenizer on a text file, and encode or decode with
// any tokenizer (bytes, a .model file, a Hugging Face tokenizer.json, or the one a model file
// records).
#include <chrono>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"
#include "retnet/retnet.h"

namespace retnet::cli {
namespace {

void register_tokenizer_train(CLI::App& parent) {
  auto o = std::make_shared<SentencePieceTrainOptions>();
  auto out = std::make_shared<std::string>();
  auto no_byte_fallback = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(0);
  auto* cmd = parent.add_subcommand(
      "train",
      "Train a SentencePiece tokenizer on a text file (lossless: the text as it is, "
      "byte fallback for rare characters)");
  cmd->add_option("--data", o->data, "Training text file (one sentence per line)")->required();
  cmd->add_option("--vocab", o->vocab_size,
                  "Vocabulary size (with byte fallback: >= 256 + the "
                  "text's characters + 4)")
      ->check(integer_within(8, 1 << 24))
      ->required();
  cmd->add_option("--out,-o", *out, "Output .model file")->required();
  add_checked(cmd, "--model-type", o->model_type, "SentencePiece algorithm",
              CLI::IsMember({"unigram", "bpe"}));
  add_checked(cmd, "--character-coverage", o->character_coverage,
              "Share of the text's characters the vocabulary covers", number_within(0, 1));
  cmd->add_flag("--no-byte-fallback", *no_byte_fallback,
                "Map characters outside the vocabulary to <unk> instead of their UTF-8 bytes "
                "(lossy)");
  add_checked(cmd, "--max-sentences", o->max_sentences, "Lines sampled for training",
              integer_at_least(1));
  add_checked(cmd, "--seed,-s", o->seed, "Seed of the line sampling", integer_at_least(0));
  cmd->add_flag("--verbose,-v", o->verbose, "Show SentencePiece's own log");
  add_threads_option(cmd, *threads);
  cmd->callback([o, out, no_byte_fallback, threads] {
    apply_threads(*threads);
    o->byte_fallback = !*no_byte_fallback;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string model = train_sentencepiece(*o);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_file_atomically(*out, model);
    auto tokenizer = make_sentencepiece_tokenizer(model, *out);
    const std::string text = read_file(o->data);
    const auto ids = tokenizer->encode(text);
    std::printf(
        "trained a %s tokenizer of %lld pieces in %.1f s; on '%s': %zu bytes -> %zu "
        "tokens (%.2f bytes per token); wrote %s\n",
        o->model_type.c_str(), (long long)tokenizer->vocab_size(), seconds, o->data.c_str(),
        text.size(), ids.size(),
        static_cast<double>(text.size()) / static_cast<double>(std::max<size_t>(1, ids.size())),
        out->c_str());
  });
}

constexpr const char* kTokenizerHelp =
    "bytes, a SentencePiece .model, a Hugging Face tokenizer.json (or a directory holding one), "
    "or a .safetensors model whose tokenizer to use";

void register_tokenizer_encode(CLI::App& parent) {
  struct Opts {
    std::string tokenizer = "bytes", text, file;
    bool add_bos = false, stats = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = parent.add_subcommand("encode",
                                    "Token ids of a text, comma-separated (the form "
                                    "`retnet logits --tokens` reads)");
  cmd->add_option("--tokenizer", o->tokenizer, kTokenizerHelp)->capture_default_str();
  auto* text = cmd->add_option("--text,-p", o->text, "The text");
  auto* file = cmd->add_option("--file,-f", o->file, "Read the text from this file");
  text->excludes(file);
  cmd->add_flag("--add-bos", o->add_bos,
                "Put the BOS token first when the tokenizer's own pipeline does (a tokenizer.json "
                "whose post-processor template starts with it)");
  cmd->add_flag("--stats", o->stats,
                "Print to stderr the bytes, tokens and encode throughput (MB/s, one thread)");
  cmd->callback([o, text, file] {
    RETNET_CHECK(text->count() + file->count() == 1, "give --text or --file");
    auto tokenizer = load_tokenizer(o->tokenizer);
    const std::string input = o->file.empty() ? o->text : read_file(o->file);
    check_encodable(*tokenizer, input, o->file.empty() ? "--text" : fmt::format("'{}'", o->file));
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tokenizer->encode(input);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o->add_bos && tokenizer->adds_bos()) ids.insert(ids.begin(), tokenizer->bos_id());
    if (o->stats)
      std::fprintf(stderr, "encoded %zu bytes into %zu tokens in %.4f s: %.2f MB/s\n", input.size(),
                   ids.size(), seconds,
                   static_cast<double>(input.size()) / 1e6 / std::max(seconds, 1e-9));
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? "," : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
  });
}

void register_tokenizer_decode(CLI::App& parent) {
  struct Opts {
    std::string tokenizer = "bytes", tokens, file;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = parent.add_subcommand("decode", "The text of comma-separated token ids");
  cmd->add_option("--tokenizer", o->tokenizer, kTokenizerHelp)->capture_default_str();
  auto* tokens = cmd->add_option("--tokens", o->tokens, "Token ids, e.g. 5,17,3");
  auto* file =
      cmd->add_option("--file,-f", o->file, "Read the comma-separated token ids from this file");
  tokens->excludes(file);
  cmd->callback([o, tokens, file] {
    RETNET_CHECK(tokens->count() + file->count() == 1, "give --tokens or --file");
    auto tokenizer = load_tokenizer(o->tokenizer);
    std::string list = o->file.empty() ? o->tokens : read_file(o->file);
    while (!list.empty() && (list.back() == '\n' || list.back() == '\r' || list.back() == ' '))
      list.pop_back();
    const std::string text = tokenizer->decode(parse_token_list(list));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::printf("\n");
  });
}

}  // namespace

void register_tokenizer(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tokenizer",
      "Train a SentencePiece tokenizer; encode and decode with bytes, a SentencePiece .model or "
      "a Hugging Face tokenizer.json");
  cmd->require_subcommand(1);
  register_tokenizer_train(*cmd);
  register_tokenizer_encode(*cmd);
  register_tokenizer_decode(*cmd);
}

}  // namespace retnet::cli
