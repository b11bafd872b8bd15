// `retnet bench speculative`: what a speculative check costs. Checking k tokens in one pass
// (Session::check) against one decode step, per weight type, and so the tokens a check must
// yield (accepted drafts + 1) to break even with plain decoding, before any drafting cost. With
// --benefit, what speculative decoding gains on trained models (cmd_bench_speculative_benefit.cpp).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "commands.h"
#include "retnet/core/parallel.h"
#include "retnet/infer/session.h"
#include "retnet/model/model_io.h"
#include "speculative_benefit.h"

namespace retnet::cli {
namespace {

struct BenchSpeculativeOptions {
  std::string model, json, backend = "cpu";
  std::vector<std::string> dtypes = {"f32", "q8_0", "q4_0"};
  std::vector<int64_t> ks = {1, 2, 4, 8, 16};
  int64_t position = 256, rounds = 16;
  int reps = 5, threads = 0;
  bool benefit = false;
};

// Median seconds per call of `call` over `rounds` calls, for each of `reps` repetitions after a
// warm-up round.
Summary time_calls(int reps, int64_t rounds, const std::function<void()>& call) {
  for (int64_t i = 0; i < rounds; ++i) call();
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < rounds; ++i) call();
    v.push_back(since(t0) / static_cast<double>(rounds));
  }
  return summarize(v);
}

nlohmann::ordered_json check_costs(const BenchSpeculativeOptions& o, const std::string& dtype) {
  Model m = o.model.empty() ? Model::init(Config{}, 1) : load_model(o.model);
  prepare_for_inference(m, dtype);
  m.use_backend(o.backend);
  const int64_t V = m.config().vocab_size;
  const std::vector<int32_t> prompt = bench_tokens(o.position, V, 1),
                             drafted =
                                 bench_tokens(*std::max_element(o.ks.begin(), o.ks.end()), V, 2);
  Session s(m);
  s.add_sequence();
  s.prefill(0, prompt.data(), static_cast<int64_t>(prompt.size()));
  const SavedSequence start = s.snapshot(0);
  // Each call starts from the same position: a step or a check, then back (outside the figure's
  // meaning but inside its time: a speculative round pays its rollback too).
  const Summary step = time_calls(o.reps, o.rounds, [&] {
    s.step(drafted.data());
    s.truncate(0, start);
  });
  nlohmann::ordered_json r = {
      {"dtype", dtype},
      {"parameters", m.parameter_count()},
      {"step_ms", to_json({1e3 * step.median, 1e3 * step.min, 1e3 * step.max})}};
  std::printf("\n%-5s step %.3f ms [%.3f, %.3f]\n%6s %12s %10s %22s\n", dtype.c_str(),
              1e3 * step.median, 1e3 * step.min, 1e3 * step.max, "k", "check ms", "vs step",
              "break-even tokens");
  for (int64_t k : o.ks) {
    const Summary check = time_calls(o.reps, o.rounds, [&] {
      s.check(0, drafted.data(), k);
      s.accept(0, 0);
      s.truncate(0, start);
    });
    const double ratio = check.median / step.median;
    std::printf("%6lld %12.3f %9.2fx %22.2f\n", (long long)k, 1e3 * check.median, ratio,
                std::max(1.0, ratio));
    r["checks"].push_back(
        {{"k", k},
         {"check_ms", to_json({1e3 * check.median, 1e3 * check.min, 1e3 * check.max})},
         {"relative_to_step", ratio},
         {"break_even_tokens_per_check", std::max(1.0, ratio)}});
  }
  std::fflush(stdout);
  return r;
}

void run_bench_speculative(const BenchSpeculativeOptions& o) {
  apply_threads(o.threads);
  nlohmann::ordered_json out = {
      {"commit", git_commit()},   {"machine", machine_json()},
      {"threads", num_threads()}, {"model", o.model.empty() ? "default config, random" : o.model},
      {"position", o.position},   {"repetitions", o.reps},
      {"rounds", o.rounds}};
  std::printf("machine: %s; %d threads; position %lld; medians of %d repetitions of %lld rounds\n",
              out["machine"]["cpu"].get<std::string>().c_str(), num_threads(),
              (long long)o.position, o.reps, (long long)o.rounds);
  for (const std::string& dtype : o.dtypes) out["runs"].push_back(check_costs(o, dtype));
  if (!o.json.empty()) write_json(o.json, out);
}

}  // namespace

void register_bench_speculative(CLI::App* bench) {
  auto [o, cmd] = add_bench_subcommand<BenchSpeculativeOptions>(
      bench, "speculative",
      "Cost of a speculative check: k tokens through Session::check (with its rollback) against "
      "one decode step, per weight type, and the tokens a check must yield to break even");
  cmd->add_option("--model,-m", o->model, "Model file (default: the default config, random)");
  add_bench_dtypes_option(cmd, o->dtypes, "Weight types, comma-separated");
  cmd->add_option("--k", o->ks, "Tokens per check, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{256}))
      ->capture_default_str();
  add_checked(cmd, "--position", o->position, "Prompt tokens before the checks",
              integer_at_least(1));
  add_checked(cmd, "--rounds", o->rounds, "Calls timed per repetition", integer_at_least(1));
  add_bench_run_options(cmd, o->reps, o->threads, o->json);
  add_backend_option(cmd, o->backend);

  // --benefit and its options; the check-cost options above do not apply to it, and its own
  // options need it: CLI11 refuses either mix by name.
  auto b = std::make_shared<SpeculativeBenefitOptions>();
  CLI::Option* benefit = cmd->add_flag(
      "--benefit", o->benefit,
      "Measure what speculative decoding gains instead: each --target decodes the prompt set "
      "(plain continuation from --data's validation split, and copy-heavy: a passage, a lead-in "
      "and its start restated with small changes) plainly, with prompt lookup and with the "
      "--draft model, the modes alternated; prints tokens/s against plain decoding (the median "
      "of each repetition's ratio), the acceptance rate and the mean accepted length per "
      "prompt kind");
  for (const char* name : {"--model", "--k", "--position", "--rounds"})
    benefit->excludes(cmd->get_option(name));
  std::vector<CLI::Option*> own = {
      cmd->add_option("--target", b->targets,
                      "With --benefit: a target model; give it several times to measure each "
                      "in turn"),
      cmd->add_option("--draft", b->draft,
                      "With --benefit: the draft model (same vocabulary and tokenizer; none: "
                      "prompt lookup only)"),
      cmd->add_option("--data", b->data,
                      "With --benefit: the text whose last 10% (the validation split of "
                      "`retnet train`) the prompts come from")
          ->capture_default_str(),
      add_checked(cmd, "--prompts", b->prompts, "With --benefit: prompts of each kind",
                  integer_at_least(1)),
      add_checked(cmd, "--prompt-bytes", b->prompt_bytes,
                  "With --benefit: bytes of a plain prompt and of a copy-heavy prompt's passage "
                  "(to the end of the line)",
                  integer_at_least(16)),
      add_checked(cmd, "--tokens,-n", b->tokens, "With --benefit: tokens generated per prompt",
                  integer_at_least(1)),
      add_checked(cmd, "--lookup", b->lookup,
                  "With --benefit: prompt lookup matches up to this many last tokens",
                  integer_within(1, 64)),
      add_checked(cmd, "--draft-max", b->draft_max,
                  "With --benefit: most tokens drafted for one check (lookup and draft model)",
                  integer_within(1, 64)),
      add_checked(cmd, "--temp", b->temperature,
                  "With --benefit: sampling temperature (0: greedy, where the text must be "
                  "plain decoding's)",
                  number_at_least(0)),
      add_checked(cmd, "--seed,-s", b->seed, "With --benefit: the sampling seed",
                  integer_at_least(0))};
  for (CLI::Option* opt : own) opt->needs(benefit);
  CLI::Option* dtypes = cmd->get_option("--dtype");
  cmd->callback([o = o, b = b, dtypes] {
    if (!o->benefit) {
      run_bench_speculative(*o);
      return;
    }
    // One weight type for every model of the run: the one given, else f32.
    if (dtypes->count() > 0) {
      RETNET_CHECK(o->dtypes.size() == 1, "--benefit takes one --dtype, got {}", o->dtypes.size());
      b->dtype = o->dtypes[0];
    }
    b->reps = o->reps;
    b->threads = o->threads;
    b->json = o->json;
    b->backend = o->backend;
    run_bench_speculative_benefit(*b);
  });
}

}  // namespace retnet::cli
