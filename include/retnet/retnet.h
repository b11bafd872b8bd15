#pragma once
// The public C++ API of the engine: what the `retnet` command, and any program or binding built on
// the engine, use. Internals (arenas, state views, kernels) stay behind it.
//
//   Model        a config and its parameters: Model::init, load_model, save_model (model files,
//                Hugging Face directories of fla and syncdoth: save_hf_directory to export)
//   ModelRunner  logits in any form, losses, gradients and evaluation over whole sequences
//   Session      decoding: prefill, batched recurrent steps, sampling, fork, snapshots, state files
//   generate     the generation loop over a session (stop strings, streaming, stats)
//   SequenceDecoder  one sequence's decode rule (sampling, end of sequence, stop strings,
//                budget), which generate and the server share
//   Tokenizer    bytes or SentencePiece: load_tokenizer, train_tokenizer
//   train        the trainer: AdamW, logging, validation, checkpoints, exact resume
//   Error        every user-facing failure; its message names the bad input
//
// This header and what it includes are the installed headers (include/). The engine's internals
// (kernels, arenas, file formats, state views) live under src/include and are not installed.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/form.h"
#include "retnet/core/threads.h"
#include "retnet/infer/decoder.h"
#include "retnet/infer/generator.h"
#include "retnet/infer/session.h"
#include "retnet/model/config.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/mixer.h"
#include "retnet/model/model.h"
#include "retnet/model/model_io.h"
#include "retnet/model/quant_io.h"
#include "retnet/text/chat_template.h"
#include "retnet/text/tokenizer.h"
#include "retnet/text/tokenizer_training.h"
#include "retnet/text/utf8.h"
#include "retnet/train/data.h"
#include "retnet/train/evaluate.h"
#include "retnet/train/trainer.h"

namespace retnet {

// Whole-sequence computations on a model, from empty sequences. Keeps its scratch memory between
// calls (sized by the largest call so far), so repeated calls allocate nothing.
class ModelRunner {
 public:
  explicit ModelRunner(const Model& model);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  const Model& model() const { return model_; }

  // Logits [batch, T, vocab] of tokens [batch, T] in a form the model's mixer has (chunk: the
  // chunkwise form's chunk size, 0: the config's). Throws Error on bad ids, forms or shapes.
  void logits(std::span<const int32_t> tokens, int64_t batch, float* out,
              Form form = Form::Parallel, int64_t chunk = 0);
  std::vector<float> logits(std::span<const int32_t> tokens, int64_t batch,
                            Form form = Form::Parallel, int64_t chunk = 0);

  // Mean cross-entropy (nats per token) of targets [batch, T] after inputs [batch, T], in a
  // training form (parallel, or chunkwise where the mixer has it). With `grads` (the model's
  // layout), also accumulates (+=) the gradient of every parameter.
  double loss(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t batch,
              Form form = Form::Parallel, int64_t chunk = 0, ParamBuffer* grads = nullptr);

  // Next-token loss over a token sequence in windows (train/evaluate.h).
  Evaluation evaluate(std::span<const int32_t> tokens, const EvalOptions& options);

 private:
  const Model& model_;
  std::unique_ptr<Arena> arena_;
};

}  // namespace retnet
