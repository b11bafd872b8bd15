// `retnet eval`: loss, perplexity and bits per byte of a model on a text file, tokenized with the
// tokenizer the model file records.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "retnet/core/read_file.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_eval(CLI::App& app) {
  struct Opts {
    std::string model, config, data, tokenizer, form = "chunkwise", dtype = "f32", backend = "cpu";
    int64_t seq = 512, batch = 8;
    double tail = 0;
    bool json = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd =
      app.add_subcommand("eval", "Loss, perplexity and bits per byte of a model on a text file");
  add_model_options(cmd, o->model, o->config);
  cmd->add_option("--data", o->data, "Text file")->required();
  add_inference_dtype_option(cmd, o->dtype);
  add_backend_option(cmd, o->backend);
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Override the model file's tokenizer (for files that record none, such as "
                  "torchscale exports): bytes or a SentencePiece .model");
  add_checked(cmd, "--form", o->form, "Form", CLI::IsMember({"parallel", "chunkwise"}));
  add_checked(cmd, "--seq", o->seq, "Tokens per window", integer_at_least(1));
  add_checked(cmd, "--batch,-b", o->batch, "Windows per batch", integer_at_least(1));
  cmd->add_option("--tail", o->tail,
                  "Evaluate only the last fraction of the file's bytes (0.1: the validation split "
                  "of `retnet train`); 0: the whole file")
      ->check(number_within(0, 1))
      ->capture_default_str();
  cmd->add_flag("--json", o->json,
                "Print one JSON object: loss, perplexity, bits_per_byte, tokens, bytes, tokenizer");
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    apply_threads(o->threads);
    Model model = load_for_inference(o->model, o->config, o->dtype, /*only_if_half=*/true);
    model.use_backend(o->backend);
    const std::unique_ptr<Tokenizer> tokenizer =
        o->tokenizer.empty() ? load_model_tokenizer(o->model) : load_tokenizer(o->tokenizer);
    RETNET_CHECK(tokenizer->vocab_size() <= model.config().vocab_size,
                 "the {} tokenizer has {} tokens but '{}' has a vocabulary of {}",
                 tokenizer->kind(), tokenizer->vocab_size(), o->model, model.config().vocab_size);
    std::string text = read_file(o->data);
    check_encodable(*tokenizer, text, fmt::format("'{}'", o->data));
    if (o->tail > 0 && o->tail < 1) {
      // The same split as `retnet train`: the last floor(size * tail) bytes, tokenized alone.
      const int64_t n_tail = validation_bytes(static_cast<int64_t>(text.size()), o->tail);
      text.erase(0, text.size() - static_cast<size_t>(n_tail));
    }
    const std::vector<int32_t> tokens = tokenizer->encode(text);
    RETNET_CHECK(tokens.size() >= 2, "'{}' holds {} tokens to evaluate; at least 2 are needed",
                 o->data, tokens.size());
    EvalOptions eo;
    eo.seq = o->seq;
    eo.batch = o->batch;
    eo.form.form = parse_form(o->form);
    // Non-overlapping windows of seq tokens covering the whole text (the last one may be shorter).
    const Evaluation e = ModelRunner(model).evaluate(tokens, eo);
    const int64_t n = e.tokens;
    const double nats = e.nats;
    // Bits per byte over the text the predictions cover: all of it but the first token's bytes,
    // which nothing predicts (with the byte tokenizer: exactly loss / ln 2).
    const int64_t bytes = std::max<int64_t>(
        1, static_cast<int64_t>(text.size() - tokenizer->decode({tokens[0]}).size()));
    const double loss = nats / n, bpb = nats / std::log(2.0) / static_cast<double>(bytes);
    if (o->json) {
      std::printf("%s\n", nlohmann::json{{"loss", loss},
                                         {"perplexity", std::exp(loss)},
                                         {"bits_per_byte", bpb},
                                         {"tokens", n},
                                         {"bytes", bytes},
                                         {"tokenizer", tokenizer->kind()}}
                              .dump()
                              .c_str());
    } else {
      std::printf(
          "%s: %lld tokens (%s), %lld bytes, loss %.4f nats/token, perplexity %.3f, "
          "%.4f bits/byte\n",
          o->data.c_str(), (long long)n, tokenizer->kind().c_str(), (long long)bytes, loss,
          std::exp(loss), bpb);
    }
  });
}

}  // namespace retnet::cli
