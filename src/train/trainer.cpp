#include "retnet/train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <utility>

#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/parallel.h"
#include "retnet/core/read_file.h"
#include "retnet/dist/communicator.h"
#include "retnet/model/model_io.h"
#include "retnet/model/training.h"
#include "retnet/text/tokenizer.h"
#include "retnet/train/checkpoint.h"
#include "retnet/train/data.h"
#include "retnet/train/evaluate.h"
#include "data_parallel.h"
#include "gradient_reducer.h"
#include "sequence_parallel.h"
#include "run_directory.h"

namespace retnet {
namespace {

std::atomic<int> g_signal{0};
extern "C" void on_stop_signal(int sig) { g_signal.store(sig); }

// Installs SIGINT/SIGTERM handlers for the run's lifetime: the loop stops at the next micro-batch,
// writes the checkpoint of the last completed step and returns.
struct SignalGuard {
  struct sigaction old_int {
  }, old_term{};
  SignalGuard() {
    g_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// GEMM peak of this host and thread count (sgemm 1024^3, best of 5): the MFU denominator.
double measure_peak_flops() {
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    sgemm(Trans::No, Trans::Yes, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    best = std::min(best, since(t0));
  }
  return 2.0 * n * n * n / best;
}

// Training FLOPs per token: 6 per weight of every matrix product (forward and backward), plus
// three times the forward FLOPs of the mixer's own core in this form (its spec's count).
double flops_per_token(const Config& c, int64_t T, Form form, int64_t chunk) {
  const double matmul_params =
      static_cast<double>(c.parameter_count() - c.vocab_size * c.embed_dim);
  double core = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    const Config lc = c.layer(l);
    core += lc.mixer->core_flops_per_token(lc, T, form, chunk);
  }
  return 6.0 * matmul_params + 3.0 * core;
}

// The model config: the file's, or the default small model; its vocabulary is the tokenizer's
// when the file does not set one, and must equal it when it does.
Config model_config(const std::string& path, const Tokenizer& tokenizer,
                    const std::string& tokenizer_spec) {
  Config config = path.empty() ? Config{} : Config::from_file(path);
  bool sets_vocab = false;
  if (!path.empty())
    sets_vocab = parse_json(read_file(path, "config file"), fmt::format("config file '{}'", path))
                     .contains("vocab_size");
  if (!sets_vocab) {
    config.vocab_size = tokenizer.vocab_size();
    config.validate();
  }
  RETNET_CHECK(config.vocab_size == tokenizer.vocab_size(),
               "the config '{}' has vocab_size {} but the tokenizer '{}' has {} tokens; set "
               "vocab_size to {} or leave it out",
               path, config.vocab_size, tokenizer_spec, tokenizer.vocab_size(),
               tokenizer.vocab_size());
  return config;
}

// Fine-tuning: the model to start from, in float32 and owning its weights (a file's mapping is
// read-only), with the tokenizer's vocabulary.
Model starting_model(const TrainOptions& o, const Tokenizer& tokenizer,
                     const std::string& tokenizer_spec) {
  RETNET_CHECK(o.config_path.empty(),
               "--config and --init-from exclude each other: a fine-tuned model keeps the config "
               "of '{}'",
               o.init_from);
  Model loaded = load_model(o.init_from);
  loaded.require_complete_weights("training from '" + o.init_from + "'");  // not a quantised file
  RETNET_CHECK(loaded.config().vocab_size == tokenizer.vocab_size(),
               "'{}' has vocab_size {} but the tokenizer '{}' has {} tokens", o.init_from,
               loaded.config().vocab_size, tokenizer_spec, tokenizer.vocab_size());
  // A converted (owned) buffer is trained in place; a read-only file mapping is copied once.
  const ParamBuffer& stored = std::as_const(loaded).params();
  if (stored.owns_memory()) return loaded;
  ParamBuffer params(stored.layout());
  std::copy(stored.data(), stored.data() + stored.size(), params.data());
  return Model(loaded.config(), std::move(params));
}

// Validation loss and bits per byte over the split's first `max_tokens` predictions.
struct Validation {
  Evaluation eval;
  double bits_per_byte = 0;
};

// With seq_parallel on every rank (each window's slices on the ranks), else on one.
Validation validate(const Model& model, std::span<const int32_t> tokens, int64_t bytes, int64_t B,
                    int64_t T, int64_t max_tokens, const TrainingOptions& to, Arena& arena,
                    Communicator* seq_parallel = nullptr) {
  Validation v;
  const EvalOptions eo{T, B, max_tokens, to};
  v.eval = seq_parallel ? sequence_parallel_evaluate(*seq_parallel, model, tokens, eo, arena)
                        : evaluate(model, tokens, eo, arena);
  // Nats per token over the split's text bytes per token: exact for the whole split, the split's
  // average rate when only its first windows are evaluated.
  const double bytes_per_token = static_cast<double>(bytes) / static_cast<double>(tokens.size());
  v.bits_per_byte = v.eval.loss / std::log(2.0) / bytes_per_token;
  return v;
}

// The settings a resumed run must share with the checkpoint's. The tokenizer's fingerprint is only
// recorded for tokenizers other than bytes, so that byte-level checkpoints of earlier versions
// still resume. The batch is the global one (ranks x per-rank batch): a run resumes on another
// number of ranks when the global batch is the same.
std::string run_json(const TrainOptions& o, const Tokenizer& tokenizer, int ranks) {
  nlohmann::ordered_json j;
  j["batch"] = o.seq_parallel ? o.batch : o.batch * ranks;
  if (o.seq_parallel) j["seq_parallel"] = true;
  j["seq"] = o.seq;
  j["grad_accum"] = o.grad_accum;
  j["form"] = form_name(o.form);
  j["chunk"] = o.chunk;
  j["lr"] = o.optimizer.lr;
  j["warmup_steps"] = o.optimizer.warmup_steps;
  j["weight_decay"] = o.optimizer.weight_decay;
  j["clip_norm"] = o.optimizer.clip_norm;
  if (tokenizer.kind() != "bytes")
    j["tokenizer"] = fmt::format("{}-{:016x}", tokenizer.kind(), tokenizer_fingerprint(tokenizer));
  if (!o.init_from.empty()) j["init_from"] = o.init_from;
  return j.dump();
}

// The options the CLI validates one by one, checked again for library callers (a zero interval
// would divide by zero, a NaN rate would train to NaN).
void check_options(const TrainOptions& o) {
  const AdamWOptions& a = o.optimizer;
  RETNET_CHECK(o.batch >= 1 && o.seq >= 1 && o.grad_accum >= 1,
               "batch, seq and grad_accum must be >= 1");
  RETNET_CHECK(o.log_interval >= 1 && o.eval_interval >= 1 && o.checkpoint_interval >= 1,
               "the log, eval and checkpoint intervals must be >= 1, got {}, {} and {}",
               o.log_interval, o.eval_interval, o.checkpoint_interval);
  RETNET_CHECK(o.steps >= 0 && o.time_budget_s >= 0 && std::isfinite(o.time_budget_s),
               "steps must be >= 0 and the time budget a finite number >= 0, got {} and {}",
               o.steps, o.time_budget_s);
  RETNET_CHECK(o.steps > 0 || o.time_budget_s > 0, "give --steps or --time-budget");
  RETNET_CHECK(std::isfinite(a.lr) && a.lr > 0 && std::isfinite(a.weight_decay) &&
                   a.weight_decay >= 0 && std::isfinite(a.clip_norm) && a.clip_norm >= 0 &&
                   a.warmup_steps >= 0,
               "the learning rate must be a finite number > 0, and weight decay, clip norm and "
               "warmup steps finite numbers >= 0; got {}, {}, {} and {}",
               a.lr, a.weight_decay, a.clip_norm, a.warmup_steps);
  RETNET_CHECK(o.chunk >= 0 && o.eval_tokens >= 0 && o.keep_checkpoints >= 1,
               "chunk and eval tokens must be >= 0 and checkpoints kept >= 1");
  const RunOptionNames names = run_option_names(o.spelling);
  RETNET_CHECK(!(o.resume && o.overwrite), "give {} or {}, not both", names.resume,
               names.overwrite);
  RETNET_CHECK(o.form == Form::Parallel || o.form == Form::Chunkwise,
               "--form must be parallel or chunkwise");
}

}  // namespace

// Restores the newest checkpoint of a run with the same settings; returns its step.
int64_t resume_from_checkpoint(const TrainOptions& o, const Tokenizer& tokenizer, int ranks,
                               Model& model, AdamW& opt, int64_t& total) {
  auto info = load_latest_checkpoint(o.out_dir, model, opt);
  const char* resume = run_option_names(o.spelling).resume;
  RETNET_CHECK(info.has_value(), "{}: no usable checkpoint in '{}'", resume, o.out_dir);
  const std::string settings = run_json(o, tokenizer, ranks);
  RETNET_CHECK(info->run_json == settings && info->seed == o.seed,
               "{}: '{}' holds a run with other settings ({}, seed {}); this one is {}, seed {}",
               resume, o.out_dir, info->run_json, info->seed, settings, o.seed);
  total = o.steps > 0 ? o.steps : info->total_steps;
  if (!o.quiet) std::fprintf(stderr, "resuming from step %lld\n", (long long)info->step);
  return info->step;
}

// One optimizer step's mean loss over its micro-batches, its gradients accumulated into `grads`
// (zeroed first): this rank's rows of the step's global batch. Returns nullopt when a signal
// arrived between micro-batches of a one-rank run: the step is dropped (several ranks agree on
// stopping at the end of a step instead). With a reducer (data parallel), the last micro-batch's
// backward pass hands it each finished range of `grads`, scaled by 1 / micro-batches there; the
// caller's reducer->finish() completes the average.
std::optional<double> step_gradients(const TrainOptions& o, const TokenDataset& data,
                                     const Model& model, int64_t step, const TrainingOptions& to,
                                     Communicator& comm, std::vector<int32_t>& in,
                                     std::vector<int32_t>& tgt, Arena& arena, ParamBuffer& grads,
                                     GradientReducer* reducer) {
  std::fill(grads.data(), grads.data() + grads.size(), 0.f);
  double loss = 0;
  TrainingOptions last_to;  // the last micro-batch's: reports finished gradients to the reducer
  if (reducer) {
    last_to = to;
    last_to.gradients_ready = [reducer](size_t begin, size_t end) { reducer->ready(begin, end); };
    last_to.backward_tick = [reducer] { reducer->progress(); };
    reducer->begin(1.f / static_cast<float>(o.grad_accum));
  }
  for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
    if (g_signal.load() != 0 && comm.size() == 1) return std::nullopt;
    // Sequence parallel: every rank takes the same rows, and its slice of each.
    sample_batch(data.train, o.batch, o.seq, o.seed,
                 static_cast<uint64_t>(step * o.grad_accum + micro), in.data(), tgt.data(),
                 o.seq_parallel ? 0 : comm.rank() * o.batch);
    if (o.seq_parallel)
      loss += sequence_parallel_loss_and_gradients(comm, model,
                                                   in.data(), tgt.data(), o.batch, o.seq,
                                                   to.chunk, arena, &grads) /
              o.grad_accum;
    else
      loss += loss_and_gradients(model, in.data(), tgt.data(), o.batch, o.seq,
                                 reducer && micro + 1 == o.grad_accum ? last_to : to, arena,
                                 &grads) /
              o.grad_accum;
  }
  if (o.grad_accum > 1 && !reducer) {
    const float s = 1.f / static_cast<float>(o.grad_accum);
    for (size_t i = 0; i < grads.size(); ++i) grads.data()[i] *= s;
  }
  return loss;
}

void print_run_header(const TrainOptions& o, const Model& model, const Tokenizer& tokenizer,
                      const TokenDataset& data, double peak, int ranks) {
  const std::string ranks_note =
      o.seq_parallel ? fmt::format(", each sequence split over {} ranks", ranks)
      : ranks > 1    ? fmt::format(" on each of {} ranks", ranks)
                     : "";
  std::fprintf(stderr,
               "%s model, %lld parameters, %s tokenizer (vocabulary %lld), %lld train / %lld val "
               "tokens%s, batch %lld x %lld (x%lld accum)%s, %s form, %d threads, GEMM peak %.0f "
               "GFLOP/s\n",
               model.config().mixer_description().c_str(), (long long)model.parameter_count(),
               tokenizer.kind().c_str(), (long long)tokenizer.vocab_size(),
               (long long)data.train.size(), (long long)data.val.size(),
               data.cache_reused ? " (token cache)" : "", (long long)o.batch, (long long)o.seq,
               (long long)o.grad_accum, ranks_note.c_str(), form_name(o.form), num_threads(),
               peak / 1e9);
}

// The llm.c-style log line of a step: speeds averaged over the steps since the last line.
struct StepLine {
  int64_t step, total;
  double loss, grad_norm, lr, ms, tokens_per_s, mfu_percent, eta_s;
};
void print_step(const StepLine& l, bool tty) {
  std::fprintf(stderr,
               "%sstep %lld/%lld | loss %.4f | grad norm %.3f | lr %.2e | %.0f ms | %.0f tok/s | "
               "MFU %.1f%% | ETA %.0f s%s",
               tty ? "\r\033[K" : "", (long long)l.step, (long long)l.total, l.loss, l.grad_norm,
               l.lr, l.ms, l.tokens_per_s, l.mfu_percent, l.eta_s, tty ? "" : "\n");
}

TokenDataset load_training_data(const TrainOptions& o, const Tokenizer& tokenizer) {
  DataOptions data_options;
  data_options.cache_dir = o.token_cache_dir;
  data_options.quiet = o.quiet;
  TokenDataset data = TokenDataset::load(o.data, tokenizer, data_options);
  RETNET_CHECK(static_cast<int64_t>(data.train.size()) > o.seq + 1 &&
                   static_cast<int64_t>(data.val.size()) > o.seq + 1,
               "'{}' is too short for windows of {} tokens: {} training and {} validation tokens",
               o.data, o.seq, data.train.size(), data.val.size());
  return data;
}

// A loss gone non-finite at `step`: the error says which checkpoint, if any, holds the last good
// weights.
Error diverged(const std::string& what, int64_t step, int64_t saved_step, const std::string& dir) {
  return Error(fmt::format(
      "{} at step {}: stopping; {}", what, step,
      saved_step >= 0
          ? fmt::format("the last good checkpoint (step {}) is kept in '{}'", saved_step, dir)
          : fmt::format("no checkpoint was written to '{}'", dir)));
}

// Validation: a metrics line, a log line, and the result's validation figures.
void log_validation(const Validation& v, int64_t step, bool quiet, bool tty,
                    const std::function<void(const nlohmann::json&)>& record, TrainResult& result) {
  record(nlohmann::json{{"step", step},
                        {"val_loss", v.eval.loss},
                        {"val_bits_per_byte", v.bits_per_byte},
                        {"val_tokens", v.eval.tokens}});
  if (!quiet)
    std::fprintf(stderr, "%sstep %lld | val loss %.4f | val ppl %.3f | %.4f bits/byte\n",
                 tty ? "\r\033[K" : "", (long long)step, v.eval.loss, std::exp(v.eval.loss),
                 v.bits_per_byte);
  result.final_val_loss = v.eval.loss;
  result.val_bits_per_byte = v.bits_per_byte;
}

// Loads the data on every rank: rank 0 first, so that the others find the token cache it wrote
// instead of all tokenizing (and writing the cache) at once.
TokenDataset load_data_on_ranks(const TrainOptions& o, const Tokenizer& tokenizer,
                                Communicator& comm) {
  if (comm.size() == 1) return load_training_data(o, tokenizer);
  std::optional<TokenDataset> data;
  if (comm.rank() == 0) data = load_training_data(o, tokenizer);
  const double timeout = comm.timeout();
  comm.set_timeout(0);  // tokenizing a large corpus takes as long as it takes
  comm.barrier();
  comm.set_timeout(timeout);
  if (comm.rank() != 0) data = load_training_data(o, tokenizer);
  return std::move(*data);
}

RunOptionNames run_option_names(OptionSpelling spelling) {
  if (spelling == OptionSpelling::Python) return {"resume=True", "overwrite=True", "out="};
  return {"--resume", "--overwrite", "--out"};
}

TrainResult train(const TrainOptions& options) {
  check_options(options);
  RETNET_CHECK(options.hash_interval >= 1 && options.comm_timeout_s >= 0 &&
                   std::isfinite(options.comm_timeout_s),
               "the hash interval must be >= 1 and the communication timeout a finite number >= "
               "0, got {} and {}",
               options.hash_interval, options.comm_timeout_s);
  RETNET_CHECK(std::isfinite(options.bucket_mib) && options.bucket_mib >= 0 &&
                   options.bucket_mib <= 1 << 20,
               "--bucket-mib must be a number from 0 to 1048576, got {}", options.bucket_mib);
  Communicator& comm = options.comm ? *options.comm : world();
  comm.set_timeout(options.comm_timeout_s);
  const int ranks = comm.size();
  // Rank 0 alone logs, evaluates and writes the run directory.
  const bool lead = comm.rank() == 0;
  TrainOptions o = options;
  if (!lead) o.quiet = true;
  namespace fs = std::filesystem;
  // Before the slow part (tokenizing): a second run on the directory fails at once.
  std::optional<RunDirectoryLock> lock;
  if (lead) lock.emplace(o.out_dir);
  if (lead && !o.resume) prepare_fresh_run(o.out_dir, o.overwrite, run_option_names(o.spelling));
  const bool fine_tune = !o.init_from.empty();
  const std::string tokenizer_spec = fine_tune && o.tokenizer == "bytes" ? o.init_from : o.tokenizer;
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(tokenizer_spec);
  Model model = fine_tune ? starting_model(o, *tokenizer, tokenizer_spec)
                          : Model::init(model_config(o.config_path, *tokenizer, o.tokenizer), o.seed);
  const Config config = model.config();
  const TokenDataset data = load_data_on_ranks(o, *tokenizer, comm);
  const auto tokenizer_meta = tokenizer_metadata(*tokenizer);
  const std::string settings = run_json(o, *tokenizer, ranks);
  if (ranks > 1)
    check_same_run(comm, fmt::format("{}{} bucket_mib={}", settings, config.to_json(), o.bucket_mib),
                   data.train, data.val, model.params());

  AdamWOptions opt_options = o.optimizer;
  opt_options.total_steps = o.steps > 0 ? o.steps : opt_options.total_steps;
  AdamW opt(model.params().layout(), opt_options);
  int64_t total = o.steps;
  int64_t start = o.resume && lead ? resume_from_checkpoint(o, *tokenizer, ranks, model, opt, total) : 0;
  if (o.resume) broadcast_training_state(comm, model, opt, start, total);
  TrainingOptions to;
  to.form = o.form;
  to.chunk = o.chunk;
  if (o.seq_parallel) {
    check_slices_supported(config);
    sequence_slice(o.seq, comm.rank(), ranks);  // refuses sequences shorter than the ranks
    to.form = o.form = Form::Chunkwise;
  }
  // The ranks' sequences: N x B rows (data parallel) or the same B rows (sequence parallel).
  const int64_t B = o.batch, T = o.seq,
                tokens_per_step = B * T * o.grad_accum * (o.seq_parallel ? 1 : ranks);
  const double peak = measure_peak_flops();
  const double fpt =
      flops_per_token(config, T, o.form, o.chunk > 0 ? o.chunk : config.recurrent_chunk_size);
  if (!o.quiet) print_run_header(o, model, *tokenizer, data, peak, ranks);

  std::optional<MetricsLog> metrics;
  if (lead) metrics.emplace((fs::path(o.out_dir) / "metrics.jsonl").string(), o.resume, start);
  // Every metrics line goes to the file and to the caller's callback, which may ask to stop.
  bool stop_requested = false;
  auto record = [&](const nlohmann::json& line) {
    if (!lead) return;
    metrics->append(line.dump());
    if (!o.on_metrics) return;
    std::map<std::string, double> figures;
    for (const auto& [key, value] : line.items()) figures[key] = value.get<double>();
    if (!o.on_metrics(figures)) stop_requested = true;
  };
  const bool tty = isatty(STDERR_FILENO);
  SignalGuard signals;
  ParamBuffer grads(model.params().layout());
  // Data parallel: the gradient average overlaps the backward pass, bucket by bucket.
  std::optional<GradientReducer> reducer;
  if (ranks > 1 && !o.seq_parallel && o.bucket_mib > 0)
    reducer.emplace(comm, grads,
                    std::max<size_t>(1, static_cast<size_t>(o.bucket_mib * (1 << 20) / 4)));
  std::vector<int32_t> in(B * T), tgt(B * T);
  Arena arena;
  TrainResult result;
  auto t_start = Clock::now(), t_probe = t_start;
  double window_time = 0, comm_ms_total = 0, step_ms_total = 0;
  int64_t window_steps = 0;
  int64_t saved_step = o.resume ? start : -1;  // the newest checkpoint's
  auto save = [&](int64_t step) {
    if (lead) {
      CheckpointInfo info{step, total, o.seed, settings};
      save_checkpoint(o.out_dir, model, opt, info, o.keep_checkpoints, tokenizer_meta);
    }
    saved_step = step;
  };
  auto run_eval = [&](int64_t step) {
    if (o.seq_parallel) {  // every rank takes its slice of the windows; rank 0 logs
      const Validation v =
          validate(model, data.val, data.val_bytes, B, T, o.eval_tokens, to, arena, &comm);
      if (lead) log_validation(v, step, o.quiet, tty, record, result);
    } else if (lead) {
      log_validation(validate(model, data.val, data.val_bytes, B, T, o.eval_tokens, to, arena),
                     step, o.quiet, tty, record, result);
    }
  };
  // The other ranks wait for rank 0's validation and checkpoint here rather than in the next
  // step's all-reduce, with a longer limit: those take longer than a step.
  auto wait_for_lead = [&] {
    if (ranks == 1) return;
    comm.set_timeout(o.comm_timeout_s * 10);
    comm.barrier();
    comm.set_timeout(o.comm_timeout_s);
  };

  int64_t step = start;
  for (; total == 0 || step < total; ++step) {
    auto t0 = Clock::now();
    std::optional<double> step_loss;
    try {
      step_loss = step_gradients(o, data, model, step, to, comm, in, tgt, arena, grads,
                                 reducer ? &*reducer : nullptr);
    } catch (const Error& e) {
      throw diverged(e.what(), step + 1, saved_step, o.out_dir);
    }
    if (!step_loss) {  // stopped by a signal between micro-batches: the step is not applied
      result.interrupted = true;
      break;
    }
    const auto t_comm = Clock::now();
    double loss = *step_loss;
    if (o.seq_parallel) {  // the ranks' shares add up to the batch's mean
      if (ranks > 1) comm.all_reduce_sum(grads.data(), grads.size());
      comm.all_reduce_sum(&loss, 1);
    } else {
      if (reducer)
        reducer->finish();  // the buckets not yet reduced; waits for all
      else
        average_gradients(comm, grads);
      comm.all_reduce_sum(&loss, 1);
      loss /= ranks;
    }
    // Includes waiting for the slowest rank: the cost of the step's synchronisation as a whole.
    // With buckets, only what the backward pass did not hide (the exposed communication).
    const double comm_ms = since(t_comm) * 1e3;
    comm_ms_total += comm_ms;
    if (!std::isfinite(loss)) throw diverged(fmt::format("loss is {}", loss), step + 1, saved_step, o.out_dir);
    const double gnorm = clip_gradients(grads, opt_options.clip_norm);
    AdamWOptions schedule = opt_options;
    schedule.total_steps = total > 0 ? total : int64_t{1} << 30;  // until a budget fixes it
    const double lr = learning_rate(schedule, step);
    opt.update(model.params(), grads, lr);
    const double ms = since(t0) * 1e3;
    window_time += ms / 1e3;
    step_ms_total += ms;
    ++window_steps;
    result.final_train_loss = loss;
    const double tps = tokens_per_step / (ms / 1e3);
    nlohmann::json line{{"step", step + 1}, {"loss", loss},  {"lr", lr},
                        {"grad_norm", gnorm}, {"ms", ms}, {"tokens_per_s", tps}};
    if (ranks > 1) line["allreduce_ms"] = comm_ms;
    record(line);
    // With only a time budget, fix the schedule's length from the speed of steps 6-10 (the first
    // ones pay for allocation and warm-up); rank 0's length holds for every rank.
    if (total == 0 && step + 1 - start == 5) t_probe = Clock::now();
    if (total == 0 && step + 1 - start == 10) {
      const double per_step = since(t_probe) / 5;
      total = step + 1 + static_cast<int64_t>((o.time_budget_s - since(t_start)) / per_step);
      total = std::max(total, step + 2);
      comm.broadcast(&total, sizeof total, 0);
    }
    if (ranks > 1 && (step + 1) % o.hash_interval == 0)
      check_same_weights(comm, model.params(), step + 1);
    const bool last = total > 0 && step + 1 >= total;
    if (!o.quiet && ((step + 1) % o.log_interval == 0 || last || tty)) {
      const double avg = window_time / window_steps;
      print_step({step + 1, total, loss, gnorm, lr, ms, tokens_per_step / avg,
                  100.0 * fpt * tokens_per_step / avg / peak / ranks,
                  total > 0 ? (total - step - 1) * avg : 0},
                 tty);
      if ((step + 1) % o.log_interval == 0) window_time = 0, window_steps = 0;
    }
    const bool eval_now = (step + 1) % o.eval_interval == 0 && !last;
    const bool save_now = (step + 1) % o.checkpoint_interval == 0 && !last;
    if (eval_now) run_eval(step + 1);
    if (save_now) save(step + 1);
    if (eval_now || save_now) wait_for_lead();
    // Stop requests (a signal, the callback, rank 0's time budget) hold for every rank at once.
    double stop[2] = {g_signal.load() != 0 || stop_requested ? 1.0 : 0.0,
                      lead && o.time_budget_s > 0 && since(t_start) >= o.time_budget_s ? 1.0 : 0.0};
    comm.all_reduce_sum(stop, 2);
    if (stop[0] > 0) {
      ++step;
      result.interrupted = true;
      break;
    }
    if (stop[1] > 0) {
      ++step;
      break;
    }
  }
  if (tty && !o.quiet) std::fprintf(stderr, "\n");
  if (ranks > 1) check_same_weights(comm, model.params(), step);
  save(step);
  result.steps = step;
  if (result.interrupted) {
    wait_for_lead();
    const char* resume = run_option_names(o.spelling).resume;
    if (!o.quiet && stop_requested)
      std::fprintf(stderr,
                   "stopped by the metrics callback at step %lld: checkpoint written; continue "
                   "with %s\n",
                   (long long)step, resume);
    else if (!o.quiet)
      std::fprintf(stderr,
                   "stopped by signal %d at step %lld: checkpoint written; continue with %s\n",
                   g_signal.load(), (long long)step, resume);
    return result;
  }
  run_eval(step);
  if (lead) save_model(model, (fs::path(o.out_dir) / "model.safetensors").string(), tokenizer_meta);
  wait_for_lead();
  result.tokens_per_s = static_cast<double>((step - start) * tokens_per_step) / since(t_start);
  if (ranks > 1 && !o.quiet && step > start)
    std::fprintf(stderr, "all-reduce: %.2f MB of gradients per step%s, %.1f ms per step on average "
                 "(%.1f%% of the steps' time)\n",
                 static_cast<double>(grads.size() * sizeof(float)) / 1e6,
                 reducer ? fmt::format(" in {} buckets overlapping the backward pass (exposed "
                                       "after it)", reducer->buckets()).c_str()
                         : "",
                 comm_ms_total / static_cast<double>(step - start),
                 100.0 * comm_ms_total / step_ms_total);
  return result;
}

}  // namespace retnet
