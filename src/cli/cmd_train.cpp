// `retnet train` and `retnet eval`.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "retnet/model/model_io.h"
#include "retnet/model/training.h"
#include "retnet/train/data.h"
#include "retnet/train/trainer.h"

namespace retnet::cli {

void register_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto form = std::make_shared<std::string>("parallel");
  auto threads = std::make_shared<int>(0);
  auto* cmd = app.add_subcommand("train", "Train a RetNet language model on a text file (byte-level)");
  cmd->add_option("--data", o->data, "Training text file")->required();
  cmd->add_option("--config", o->config_path, "Model config JSON (default: the small model)");
  cmd->add_option("--out", o->out_dir, "Run directory: model, checkpoints, metrics.jsonl")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Optimizer steps");
  cmd->add_option("--time-budget", o->time_budget_s, "Stop after this many seconds");
  cmd->add_option("--batch,-b", o->batch, "Sequences per micro-batch")->capture_default_str();
  cmd->add_option("--seq", o->seq, "Tokens per sequence")->capture_default_str();
  cmd->add_option("--grad-accum", o->grad_accum, "Micro-batches per step")->capture_default_str();
  cmd->add_option("--lr", o->optimizer.lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--warmup", o->optimizer.warmup_steps, "Warmup steps")->capture_default_str();
  cmd->add_option("--weight-decay", o->optimizer.weight_decay, "AdamW weight decay")
      ->capture_default_str();
  cmd->add_option("--clip", o->optimizer.clip_norm, "Gradient norm limit (0: off)")
      ->capture_default_str();
  cmd->add_option("--form", *form, "Training form")
      ->check(CLI::IsMember({"parallel", "chunkwise"}))
      ->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Chunk size of the chunkwise form");
  cmd->add_option("--seed,-s", o->seed, "Seed of the initialisation and the batches")
      ->capture_default_str();
  cmd->add_flag("--resume", o->resume, "Continue the run in --out from its last checkpoint");
  cmd->add_option("--log-interval", o->log_interval, "Steps between log lines")->capture_default_str();
  cmd->add_option("--eval-interval", o->eval_interval, "Steps between validations")
      ->capture_default_str();
  cmd->add_option("--checkpoint-interval", o->checkpoint_interval, "Steps between checkpoints")
      ->capture_default_str();
  cmd->add_option("--eval-tokens", o->eval_tokens, "Validation tokens per evaluation (0: all)")
      ->capture_default_str();
  cmd->add_option("--keep", o->keep_checkpoints, "Checkpoints kept")->capture_default_str();
  cmd->add_option("--threads,-t", *threads, "Threads (default: all cores)");
  cmd->callback([o, form, threads] {
    apply_threads(*threads);
    o->form = parse_retention_form(*form);
    TrainResult r = train(*o);
    if (!r.interrupted)
      std::printf("trained %lld steps: train loss %.4f, val loss %.4f nats/token (%.4f bits/byte), "
                  "%.0f tokens/s; model in %s/model.safetensors\n",
                  (long long)r.steps, r.final_train_loss, r.final_val_loss, r.val_bits_per_byte,
                  r.tokens_per_s, o->out_dir.c_str());
  });
}

void register_eval(CLI::App& app) {
  struct Opts {
    std::string model, config, data, form = "chunkwise";
    int64_t seq = 512, batch = 8;
    double tail = 0;
    bool json = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("eval", "Loss, perplexity and bits per byte of a model on a text file");
  cmd->add_option("--model,-m", o->model, "Model .safetensors file")->required();
  cmd->add_option("--config-json", o->config, "Config JSON for a file that has none");
  cmd->add_option("--data", o->data, "Text file (byte-level tokens)")->required();
  cmd->add_option("--form", o->form, "Form")->check(CLI::IsMember({"parallel", "chunkwise"}))
      ->capture_default_str();
  cmd->add_option("--seq", o->seq, "Tokens per window")->capture_default_str();
  cmd->add_option("--batch,-b", o->batch, "Windows per batch")->capture_default_str();
  cmd->add_option("--tail", o->tail,
                  "Evaluate only the last fraction of the file (0.1: the validation split of "
                  "`retnet train`); 0: the whole file")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--threads,-t", o->threads, "Threads (default: all cores)");
  cmd->callback([o] {
    apply_threads(o->threads);
    Model model = load_model(o->model, optional_config(o->config));
    RETNET_CHECK(o->seq >= 1 && o->batch >= 1, "--seq and --batch must be >= 1");
    std::ifstream in(o->data, std::ios::binary);
    RETNET_CHECK(in.good(), "cannot open '{}'", o->data);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (o->tail > 0) {
      // The same split as `retnet train`: the last floor(size * tail) bytes.
      const size_t n_tail = static_cast<size_t>(static_cast<double>(text.size()) * o->tail);
      text = text.substr(text.size() - n_tail);
    }
    RETNET_CHECK(text.size() >= 2, "'{}' holds fewer than 2 bytes to evaluate", o->data);
    std::vector<int32_t> tokens(text.begin(), text.end());
    for (auto& t : tokens) t &= 0xff;
    TrainingOptions to;
    to.form = parse_retention_form(o->form);
    Arena arena;
    // Non-overlapping windows of seq tokens covering the whole file (the last one may be shorter).
    const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
    double sum = 0;
    for (int64_t start = 0; start < n; start += o->seq) {
      const int64_t T = std::min(o->seq, n - start);
      sum += loss_and_gradients(model, tokens.data() + start, tokens.data() + start + 1, 1, T, to,
                                arena, nullptr) * T;
    }
    const double loss = sum / n, bpb = loss / std::log(2.0);
    if (o->json) {
      std::printf("%s\n", nlohmann::json{{"loss", loss}, {"perplexity", std::exp(loss)},
                                         {"bits_per_byte", bpb}, {"tokens", n}}.dump().c_str());
    } else {
      std::printf("%s: %lld tokens, loss %.4f nats/token, perplexity %.3f, %.4f bits/byte\n",
                  o->data.c_str(), (long long)n, loss, std::exp(loss), bpb);
    }
  });
}

}  // namespace retnet::cli
