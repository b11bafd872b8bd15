// `retnet train`.
#include <filesystem>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "retnet/dist/communicator.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto form = std::make_shared<std::string>("parallel");
  auto threads = std::make_shared<int>(0);
  auto* cmd = app.add_subcommand("train", "Train a RetNet language model on a text file");
  cmd->add_option("--data", o->data,
                  "Training text file; its last 10% is the validation split")->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "bytes (vocabulary 256), a SentencePiece .model (see `retnet tokenizer train`) "
                  "or a .safetensors model or model directory whose tokenizer to reuse; recorded in "
                  "the model file")
      ->capture_default_str();
  cmd->add_option("--token-cache-dir", o->token_cache_dir,
                  "Where the tokenized corpus is cached (default: .cache next to --data)");
  cmd->add_option("--config", o->config_path,
                  "Model config JSON (default: the small model); vocab_size defaults to the "
                  "tokenizer's");
  cmd->add_option("--init-from", o->init_from,
                  "Fine-tune: start from this model's weights and config (a .safetensors model "
                  "or a Hugging Face directory) and its tokenizer, instead of a fresh model");
  cmd->add_option("--out", o->out_dir, "Run directory: model, checkpoints, metrics.jsonl")
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Optimizer steps")->check(integer_at_least(1));
  cmd->add_option("--time-budget", o->time_budget_s, "Stop after this many seconds")
      ->check(number_above(0));
  add_checked(cmd, "--batch,-b", o->batch, "Sequences per micro-batch", integer_at_least(1));
  add_checked(cmd, "--seq", o->seq, "Tokens per sequence", integer_at_least(1));
  add_checked(cmd, "--grad-accum", o->grad_accum, "Micro-batches per step", integer_at_least(1));
  add_checked(cmd, "--lr", o->optimizer.lr, "Peak learning rate", number_above(0));
  add_checked(cmd, "--warmup", o->optimizer.warmup_steps, "Warmup steps", integer_at_least(0));
  add_checked(cmd, "--weight-decay", o->optimizer.weight_decay, "AdamW weight decay",
              number_at_least(0));
  add_checked(cmd, "--clip", o->optimizer.clip_norm, "Gradient norm limit (0: off)",
              number_at_least(0));
  CLI::Option* form_option = add_checked(cmd, "--form", *form, "Training form",
                                         CLI::IsMember({"parallel", "chunkwise"}));
  cmd->add_option("--chunk", o->chunk, "Chunk size of the chunkwise form (0: the config's)")
      ->check(integer_at_least(0));
  add_checked(cmd, "--seed,-s", o->seed, "Seed of the initialisation and the batches",
              integer_at_least(0));
  auto* resume =
      cmd->add_flag("--resume", o->resume, "Continue the run in --out from its last checkpoint");
  cmd->add_flag("--overwrite", o->overwrite,
                "Start over in an --out that holds an earlier run: delete its checkpoints and "
                "model (without --resume or this, such a directory is refused)")
      ->excludes(resume);
  add_checked(cmd, "--log-interval", o->log_interval, "Steps between log lines",
              integer_at_least(1));
  add_checked(cmd, "--eval-interval", o->eval_interval, "Steps between validations",
              integer_at_least(1));
  add_checked(cmd, "--checkpoint-interval", o->checkpoint_interval, "Steps between checkpoints",
              integer_at_least(1));
  add_checked(cmd, "--eval-tokens", o->eval_tokens, "Validation tokens per evaluation (0: all)",
              integer_at_least(0));
  add_checked(cmd, "--keep", o->keep_checkpoints, "Checkpoints kept", integer_at_least(1));
  add_checked(cmd, "--hash-interval", o->hash_interval,
              "Under mpirun: steps between checks that every rank holds the same weights",
              integer_at_least(1));
  add_checked(cmd, "--comm-timeout", o->comm_timeout_s,
              "Under mpirun: seconds a rank waits for the others before it ends the job (a rank "
              "died or hung; 0: wait forever)",
              number_at_least(0));
  add_checked(cmd, "--bucket-mib", o->bucket_mib,
              "Under mpirun (data parallel): MiB of gradients per all-reduce bucket, each started "
              "while the backward pass goes on (0: one all-reduce after the backward pass)",
              number_at_least(0));
  cmd->add_flag("--seq-parallel", o->seq_parallel,
                "Under mpirun: split each sequence into one contiguous slice per rank and pass "
                "the mixers' states between ranks (every rank trains the same --batch sequences; "
                "chunkwise form; constant-state mixers only)");
  add_threads_option(cmd, *threads);
  cmd->callback([o, form, form_option, threads] {
    apply_threads(*threads);
    // Slices pass states between ranks, which only the chunkwise form takes.
    RETNET_CHECK(!(o->seq_parallel && form_option->count() > 0 && *form == "parallel"),
                 "--seq-parallel trains in the chunkwise form; drop --form parallel");
    o->form = parse_form(*form);
    for (const char* written : {"model.safetensors", "metrics.jsonl"})
      check_output_not_input((std::filesystem::path(o->out_dir) / written).string(),
                             "run file",
                             {{o->data, "--data file"},
                              {o->config_path, "--config file"},
                              {o->init_from, "--init-from model"},
                              {o->tokenizer == "bytes" ? "" : o->tokenizer, "--tokenizer"}});
    // Under mpirun (`mpirun -np N retnet train ...`) the ranks train data-parallel (or sequence
    // parallel with --seq-parallel); alone, one process. An error on one rank of several ends
    // them all: the others would wait for it.
    Communicator& comm = world();
    TrainResult r;
    try {
      r = train(*o);
    } catch (const std::exception& e) {
      if (comm.size() > 1) comm.abort(e.what(), 1);
      throw;
    }
    if (!r.interrupted && comm.rank() == 0)
      std::printf("trained %lld steps: train loss %.4f, val loss %.4f nats/token (%.4f bits/byte), "
                  "%.0f tokens/s; model in %s/model.safetensors\n",
                  (long long)r.steps, r.final_train_loss, r.final_val_loss, r.val_bits_per_byte,
                  r.tokens_per_s, o->out_dir.c_str());
  });
}

}  // namespace retnet::cli
