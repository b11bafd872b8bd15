#pragma once
// `retnet train` as a library call: trains a RetNet language model on a text file with AdamW,
// logging, validation, checkpoints and exact resume.
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "retnet/core/form.h"
#include "retnet/train/optimizer.h"

namespace retnet {

class Communicator;  // dist/communicator.h

// How messages name the run's options: as `retnet train`'s flags or as Python's keywords.
enum class OptionSpelling { Cli, Python };
struct RunOptionNames {
  const char *resume, *overwrite, *out;  // "--resume" or "resume=True", ...
};
RunOptionNames run_option_names(OptionSpelling spelling);

struct TrainOptions {
  std::string data;                  // text file
  std::string tokenizer = "bytes";   // "bytes", a SentencePiece .model, or a model file's tokenizer
  std::string token_cache_dir;       // empty: .cache next to the data (train/data.h)
  std::string config_path;           // model config JSON; empty: the default small model; a config
                                     // without vocab_size takes the tokenizer's
  // Fine-tuning: start from this model's weights and config (a model file or a Hugging Face
  // directory) instead of a fresh initialisation; its tokenizer unless `tokenizer` names another.
  std::string init_from;
  std::string out_dir = "runs/retnet";
  int64_t steps = 0;                 // optimizer steps (0: decided by time_budget_s)
  double time_budget_s = 0;          // stop after this many seconds (0: no limit)
  // batch is per rank: started by `mpirun -np N`, rank r trains on rows [r*batch, (r+1)*batch)
  // of the global batch of N*batch rows one process would draw (data parallel).
  int64_t batch = 8, seq = 256, grad_accum = 1;
  // Sequence parallel instead: every rank takes the same `batch` sequences of `seq` tokens and
  // trains the r-th of N contiguous slices of each, in the chunkwise form, passing the mixers'
  // states between ranks (constant-state mixers only; docs/distributed.md).
  bool seq_parallel = false;
  Form form = Form::Parallel;
  int64_t chunk = 0;                 // chunkwise: 0 = the config's recurrent_chunk_size
  uint64_t seed = 1;
  bool resume = false;
  bool overwrite = false;  // a fresh run deletes an earlier run's checkpoints and model
                           // in out_dir (without it, such a directory is refused)
  AdamWOptions optimizer;
  int64_t log_interval = 10, eval_interval = 200, checkpoint_interval = 200;
  int64_t eval_tokens = 1 << 17;     // validation tokens per evaluation (0: the whole split)
  int keep_checkpoints = 3;
  bool quiet = false;
  // Several ranks: every this many steps the ranks check that their weights are identical.
  int64_t hash_interval = 100;
  // Seconds a rank waits for the others in a collective before it ends the job (0: forever).
  double comm_timeout_s = 300;
  // Data parallel: the gradients are averaged in buckets of this many MiB, each all-reduced as
  // soon as the backward pass has finished its layers, while it computes the earlier ones. 0: one
  // all-reduce of the whole buffer after the backward pass. Every rank must use the same value.
  double bucket_mib = 1;
  OptionSpelling spelling = OptionSpelling::Cli;  // for the messages that name resume/overwrite
  Communicator* comm = nullptr;  // nullptr: world() (MPI's ranks under mpirun, else one process)
  // Called with each metrics line's figures (a step's: step, loss, lr, grad_norm, ms,
  // tokens_per_s; a validation's: step, val_loss, val_bits_per_byte, val_tokens). Returning false
  // stops the run after the current step as a signal does: a checkpoint is written, resuming
  // continues it.
  std::function<bool(const std::map<std::string, double>&)> on_metrics;
};

struct TrainResult {
  int64_t steps = 0;
  double final_train_loss = 0, final_val_loss = 0, val_bits_per_byte = 0;
  double tokens_per_s = 0;
  bool interrupted = false;
};

TrainResult train(const TrainOptions& options);

}  // namespace retnet
