#pragma once
// Subcommands of the `retnet` binary; each registers its options and its action on the app.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "retnet/core/file_checks.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_init(CLI::App& app);
void register_info(CLI::App& app);
void register_export(CLI::App& app);
void register_quantize(CLI::App& app);
void register_logits(CLI::App& app);
void register_demo(CLI::App& app);
void register_grad(CLI::App& app);
void register_train(CLI::App& app);
void register_eval(CLI::App& app);
void register_tokenizer(CLI::App& app);
void register_chat_template(CLI::App& app);
void register_generate(CLI::App& app);
void register_bench(CLI::App& app);
// `retnet serve` (apps/server/cmd_serve.cpp).
void register_serve(CLI::App& app);

// "5,17,3" -> {5, 17, 3}; throws Error on anything else.
std::vector<int32_t> parse_token_list(const std::string& text);
// Sets the thread count (<= 0: all cores) for our loops and BLAS.
void apply_threads(int threads);
// `retnet bench family` (cmd_bench_family.cpp), under the `bench` command.
void register_bench_family(CLI::App* bench);
// `retnet bench paper` and its hidden `paper-probe` (cmd_bench_paper.cpp).
void register_bench_paper(CLI::App* bench);
// `retnet bench model` (cmd_bench_model.cpp): load, RSS, prefill and decode of one model.
void register_bench_model(CLI::App* bench);
// A `retnet bench` subcommand and the options its callback will read (shared, so the callback
// keeps them alive).
template <typename Options>
std::pair<std::shared_ptr<Options>, CLI::App*> add_bench_subcommand(CLI::App* bench,
                                                                   const std::string& name,
                                                                   const std::string& about) {
  return {std::make_shared<Options>(), bench->add_subcommand(name, about)};
}
// --reps (median of that many), --threads and --json FILE (results also written there).
void add_bench_run_options(CLI::App* cmd, int& reps, int& threads, std::string& json);
std::optional<Config> optional_config(const std::string& path);
// --model,-m (required: a model file or a Hugging Face directory) and --config-json (the config
// of a file that has none, such as a torchscale export).
void add_model_options(CLI::App* cmd, std::string& model, std::string& config_json);

// --backend cpu|reference: what the model's passes run on (Model::use_backend); `backend` holds
// its default, "cpu".
CLI::Option* add_backend_option(CLI::App* cmd, std::string& backend);

// --dtype f32|bf16|f16 (alias --weights): the element type of the projection matrices kept for
// inference; `dtype` holds its default.
CLI::Option* add_inference_dtype_option(CLI::App* cmd, std::string& dtype);
// A benchmark's --dtype,--weights: several weight types, comma-separated, measured in turn.
CLI::Option* add_bench_dtypes_option(CLI::App* cmd, std::vector<std::string>& dtypes,
                                     const std::string& help);
// Prepares `model` for inference in `dtype` (one packed copy of the projections replaces the
// float32 originals); with `only_if_half`, f32 leaves the model as loaded (exact sgemm path).
void prepare_for_inference(Model& model, const std::string& dtype, bool only_if_half = false);
// The model read straight into its weights in `dtype` (load_model_for_inference: no whole float32
// copy while loading; with `in_place`, a directory's tensors stored in the dtype are used where
// they lie in the mapped files); with `only_if_half`, f32 loads the float32 model as it is.
Model load_for_inference(const std::string& path, const std::string& config_json,
                         const std::string& dtype, bool only_if_half = false,
                         bool in_place = true);

// --format fla|syncdoth (a Hugging Face directory's layout) and --dtype f32|bf16 (its stored
// weights), for `init` and `export`.
CLI::Option* add_directory_options(CLI::App* cmd, std::string& format, std::string& dtype,
                                   const std::string& format_help);

// What `logits` and `grad` take: a model, one token sequence, a form and its chunk, an output
// file, threads.
struct SequenceCommandOptions {
  std::string model, config, tokens, form = "parallel", out, backend = "cpu";
  int64_t chunk = 0;
  int threads = 0;
};
// Registers them; `forms` are the forms --form (or --mode, its name in `logits`) accepts.
void add_sequence_options(CLI::App* cmd, SequenceCommandOptions& o, const std::string& form_flag,
                          const std::vector<std::string>& forms, const std::string& tokens_help,
                          const std::string& out_help);

// Validators for numeric options, to pass to add_option(...)->check(). The value must be a finite
// number in range (CLI11's Range and PositiveNumber let NaN through); CLI11 names the option:
// "--lr: must be a finite number > 0, got -1".
CLI::Validator number_at_least(double min);
CLI::Validator number_above(double min);
CLI::Validator number_within(double lo, double hi);  // [lo, hi]
// An integer option's accepted range; add_checked narrows it to the option's type, so a value
// the type cannot hold is refused with the range instead of wrapped or clamped by the conversion.
struct IntegerRange {
  int64_t lo = 0;
  uint64_t hi = UINT64_MAX;
  // Checked against [lo, min(hi, INT64_MAX)], for an int64_t option given to ->check().
  operator CLI::Validator() const;  // NOLINT: reads as a validator at ->check() call sites
};
IntegerRange integer_at_least(int64_t min);
IntegerRange integer_within(int64_t lo, int64_t hi);
// "must be an integer in [lo, hi], got <text>": the whole text a decimal integer, compared exactly.
CLI::Validator integer_validator(int64_t lo, uint64_t hi);
// An option that must pass `check` and shows its default in --help: one call per option.
template <typename T>
CLI::Option* add_checked(CLI::App* cmd, const std::string& name, T& value, const std::string& help,
                         const CLI::Validator& check) {
  return cmd->add_option(name, value, help)->check(check)->capture_default_str();
}
template <typename T>
CLI::Option* add_checked(CLI::App* cmd, const std::string& name, T& value, const std::string& help,
                         const IntegerRange& range) {
  static_assert(std::is_integral_v<T>, "an IntegerRange checks an integer option");
  const int64_t type_lo = static_cast<int64_t>(std::numeric_limits<T>::min());
  const uint64_t type_hi = static_cast<uint64_t>(std::numeric_limits<T>::max());
  return cmd->add_option(name, value, help)
      ->check(integer_validator(std::max(range.lo, type_lo), std::min(range.hi, type_hi)))
      ->capture_default_str();
}
// --threads,-t (0: all cores), validated.
CLI::Option* add_threads_option(CLI::App* cmd, int& threads,
                                const std::string& help = "Threads (default: all cores)");
std::string human_bytes(double bytes);
// Refuses an output path that is one of the command's inputs (same file, or a file of an input
// directory), naming both: writing it would destroy what the command reads. Inputs are
// (path, description) pairs; empty paths are skipped.
void check_output_not_input(const std::string& output, const std::string& output_what,
                            const std::vector<std::pair<std::string, std::string>>& inputs);

}  // namespace retnet::cli
