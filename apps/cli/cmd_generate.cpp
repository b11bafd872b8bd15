// `retnet generate`: chunkwise prefill of the prompt, then recurrent decoding with sampling,
// streamed as complete UTF-8 characters; batched decoding of a prompts file; state save/restore.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "commands.h"
#include "retnet/core/process_memory.h"
#include "retnet/core/read_file.h"
#include "retnet/infer/draft_model.h"
#include "retnet/retnet.h"

namespace retnet::cli {
namespace {

struct GenerateArgs {
  std::string model, config, draft_model, prompt, prompt_file, prompts_file, state_in, state_out,
      weights = "f32", backend = "cpu";
  bool prompt_given = false;
  int64_t max_tokens = 128, max_prompt_tokens = 262144, chunk = 0, repeat_last_n = 64;
  float temperature = 0.8f, top_p = 0.95f, repeat_penalty = 1.0f, min_p = 0.0f;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int64_t top_k = 40;
  int64_t lookup = 0, draft_max = 8;
  std::string seed = "-1";  // the whole uint64 range, or -1
  std::vector<std::string> stop;
  int threads = 0;
  bool stats = false, json = false, ignore_eos = false, no_bos = false, no_mmap = false;
};

std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text,
                                   const GenerateArgs& a, const std::string& where) {
  require_utf8(text, where);
  std::vector<int32_t> ids = tok.encode(text);
  // As Hugging Face tokenizes a prompt (add_special_tokens): the BOS its tokenizer.json puts first,
  // unless the text continues a saved state.
  if (tok.adds_bos() && !a.no_bos && a.state_in.empty()) ids.insert(ids.begin(), tok.bos_id());
  RETNET_CHECK(static_cast<int64_t>(ids.size()) <= a.max_prompt_tokens,
               "{} has {} tokens, more than --max-prompt-tokens {} (raise it to feed a longer "
               "prompt: prefill runs in bounded memory)",
               where, ids.size(), a.max_prompt_tokens);
  return ids;
}

// Median step latency in a window of 16 steps around each reported position.
nlohmann::json latency_by_position(const std::vector<StepLatency>& steps) {
  nlohmann::json out = nlohmann::json::object();
  if (steps.empty()) return out;
  std::vector<int64_t> wanted;
  for (int64_t p : {16, 128, 1024, 4096, 16384})
    if (p >= steps.front().position && p <= steps.back().position) wanted.push_back(p);
  wanted.push_back(steps.back().position);
  for (int64_t p : wanted) {
    std::vector<double> window;
    for (const auto& s : steps)
      if (s.position >= p - 8 && s.position < p + 8) window.push_back(s.seconds);
    if (window.empty()) continue;
    std::nth_element(window.begin(), window.begin() + window.size() / 2, window.end());
    out[std::to_string(p)] = 1e3 * window[window.size() / 2];
  }
  return out;
}

void print_timings(double load_s, const GenerationTimings& t, double total_s) {
  auto line = [](const char* what, double s, int64_t n, const char* unit) {
    std::fprintf(
        stderr,
        "retnet: %16s = %10.2f ms / %5lld %-6s (%8.3f ms per token, %9.2f tokens per second)\n",
        what, 1e3 * s, (long long)n, unit, n ? 1e3 * s / n : 0.0, s > 0 ? n / s : 0.0);
  };
  std::fprintf(stderr, "\nretnet: %16s = %10.2f ms\n", "load time", 1e3 * load_s);
  line("prompt eval time", t.prefill_s, t.prefill_tokens, "tokens");
  line("eval time", t.decode_s, t.decode_tokens, "runs");
  std::fprintf(stderr, "retnet: %16s = %10.2f ms / %5lld tokens\n", "total time", 1e3 * total_s,
               (long long)(t.prefill_tokens + t.decode_tokens));
  if (t.checks > 0)
    std::fprintf(stderr, "retnet: %16s = %5lld of %5lld drafted tokens in %lld checks (%.1f%%)\n",
                 "accepted", (long long)t.accepted_tokens, (long long)t.drafted_tokens,
                 (long long)t.checks,
                 t.drafted_tokens ? 100.0 * t.accepted_tokens / t.drafted_tokens : 0.0);
}

GenerateOptions generate_options(const GenerateArgs& a) {
  GenerateOptions go;
  go.max_tokens = a.max_tokens;
  go.stop = a.stop;
  go.stop_at_eos = !a.ignore_eos;
  go.record_latency = a.stats;
  go.sampling.temperature = a.temperature;
  go.sampling.top_k = a.top_k;
  go.sampling.top_p = a.top_p;
  go.sampling.repeat_penalty = a.repeat_penalty;
  go.sampling.repeat_last_n = a.repeat_last_n;
  go.sampling.min_p = a.min_p;
  go.sampling.presence_penalty = a.presence_penalty;
  go.sampling.frequency_penalty = a.frequency_penalty;
  go.sampling.seed = a.seed == "-1" ? std::random_device{}() : std::stoull(a.seed);
  go.sampling.validate();
  go.speculative.lookup = a.lookup;
  go.speculative.draft_max = a.draft_max;
  return go;
}

// The prompts' texts: one per non-empty line of --prompts-file, else --prompt-file or --prompt.
std::vector<std::string> prompt_texts(const GenerateArgs& a) {
  std::vector<std::string> texts;
  if (a.prompts_file.empty()) {
    texts.push_back(a.prompt_file.empty() ? a.prompt : read_file(a.prompt_file, "prompt file"));
    return texts;
  }
  const std::string all = read_file(a.prompts_file, "prompts file");
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\n', start);
    if (end == std::string::npos) end = all.size();
    std::string line = all.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) texts.push_back(line);
    start = end + 1;
  }
  RETNET_CHECK(!texts.empty(), "prompts file '{}' holds no prompt (one per line)", a.prompts_file);
  return texts;
}

void run_generate(const GenerateArgs& a) {
  apply_threads(a.threads);
  const auto t_start = std::chrono::steady_clock::now();
  const int sources = (a.prompt_given ? 1 : 0) + !a.prompt_file.empty() + !a.prompts_file.empty();
  RETNET_CHECK(sources <= 1, "give only one of --prompt, --prompt-file and --prompts-file");
  RETNET_CHECK(a.prompts_file.empty() || (a.state_in.empty() && a.state_out.empty()),
               "--state-in and --state-out work on one sequence, not with --prompts-file");
  RETNET_CHECK(a.draft_model.empty() || a.prompts_file.empty(),
               "--draft-model decodes one prompt, not a --prompts-file batch");
  RETNET_CHECK(a.draft_model.empty() || a.lookup == 0, "give --lookup or --draft-model, not both");
  RETNET_CHECK(a.draft_model.empty() || a.state_in.empty(),
               "--draft-model needs the whole text as the prompt, not --state-in");
  RETNET_CHECK(sources == 1 || !a.state_in.empty(),
               "nothing to continue: give --prompt, --prompt-file, --prompts-file or --state-in");

  // --state-in may equal --state-out (the state is read whole, then replaced atomically).
  check_output_not_input(a.state_out, "--state-out file",
                         {{a.model, "model"},
                          {a.config, "config file"},
                          {a.prompt_file, "prompt file"},
                          {a.prompts_file, "prompts file"}});
  Model model = load_for_inference(a.model, a.config, a.weights, false, !a.no_mmap);
  model.use_backend(a.backend);
  std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(a.model);
  std::optional<Model> draft;
  if (!a.draft_model.empty()) {
    draft.emplace(load_draft_model(a.draft_model, parse_decode_precision(a.weights, "--dtype"),
                                   !a.no_mmap, model, *tokenizer, a.model));
    draft->use_backend(a.backend);
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  const int64_t rss_after_load = current_rss_bytes();

  GenerateOptions go = generate_options(a);
  if (draft) go.speculative.draft_model = &*draft;
  const std::vector<std::string> texts = prompt_texts(a);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i)
    prompts.push_back(encode_prompt(
        *tokenizer, texts[i], a,
        a.prompts_file.empty() ? std::string("the prompt") : fmt::format("prompt {}", i + 1)));

  SessionOptions so;
  so.capacity = static_cast<int64_t>(prompts.size());
  so.prefill_chunk = a.chunk;
  so.history = std::max<int64_t>(a.repeat_last_n, 1);
  so.decode_threads = std::max(a.threads, 0);  // 0: the session picks (one for small models)
  Session session(model, so);
  for (size_t i = 0; i < prompts.size(); ++i) session.add_sequence();
  std::vector<std::string> tails;
  if (!a.state_in.empty()) tails.push_back(session.load(a.state_in, 0));
  const int64_t resumed_position = session.position(0);
  if (a.state_in.empty() && prompts.size() == 1)
    RETNET_CHECK(!prompts[0].empty(),
                 "the prompt is empty: give some text, or --state-in to "
                 "continue a saved state");

  const bool stream = !a.json && a.prompts_file.empty();
  TextCallback on_text;
  if (stream) {
    on_text = [](int64_t, std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
  }
  GenerationTimings timings;
  std::vector<SequenceResult> results =
      generate(session, *tokenizer, prompts, go, &timings, on_text, tails);
  if (!a.state_out.empty()) {
    session.save(a.state_out, 0, results[0].text_tail);
  } else {
    for (auto& r : results) {  // no state to carry an unfinished character: show it as U+FFFD
      const std::string tail = utf8_sanitize(r.text_tail);
      if (stream) std::fwrite(tail.data(), 1, tail.size(), stdout);
      r.text += tail;
    }
  }
  if (stream) {
    std::printf("\n");
    std::fflush(stdout);  // before the stats and timings on stderr
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  nlohmann::json stats = nlohmann::json::object();
  if (a.stats) {
    stats["prefill_tokens_per_s"] =
        timings.prefill_s > 0 ? timings.prefill_tokens / timings.prefill_s : 0.0;
    stats["decode_tokens_per_s"] =
        timings.decode_s > 0 ? timings.decode_tokens / timings.decode_s : 0.0;
    stats["latency_ms_by_position"] = latency_by_position(timings.steps);
    stats["load_seconds"] = load_s;  // model and tokenizer, until the first prompt is encoded
    stats["rss_after_load_bytes"] = rss_after_load;
    stats["weights_in_place_bytes"] = model.in_place_bytes();
    stats["rss_bytes"] = static_cast<int64_t>(current_rss_bytes());
    stats["peak_rss_bytes"] = static_cast<int64_t>(peak_rss_bytes());
    // The first sequence's state at its end (with its cache, for the mixers that keep one).
    const int64_t end_position =
        resumed_position + results[0].prompt_tokens + results[0].generated_tokens;
    stats["state_bytes"] =
        model.state_bytes_per_sequence() + end_position * model.config().cache_floats_per_token() *
                                               static_cast<int64_t>(sizeof(float));
    stats["decode_threads"] = session.decode_threads();
  }
  if (go.speculative.enabled() && (a.stats || a.json)) {
    stats["checks"] = timings.checks;
    stats["drafted_tokens"] = timings.drafted_tokens;
    stats["accepted_tokens"] = timings.accepted_tokens;
  }
  if (a.json && a.prompts_file.empty()) {
    nlohmann::json j = {{"text", results[0].text},
                        {"prompt_tokens", results[0].prompt_tokens},
                        {"generated_tokens", results[0].generated_tokens},
                        {"finish_reason", results[0].finish_reason},
                        {"seed", go.sampling.seed}};
    j.update(stats);
    std::printf("%s\n", j.dump().c_str());
  } else if (!a.prompts_file.empty()) {
    for (size_t i = 0; i < results.size(); ++i) {
      nlohmann::json j = {{"index", i},
                          {"prompt", texts[i]},
                          {"text", results[i].text},
                          {"prompt_tokens", results[i].prompt_tokens},
                          {"generated_tokens", results[i].generated_tokens},
                          {"finish_reason", results[i].finish_reason}};
      std::printf("%s\n", j.dump().c_str());
    }
    if (a.stats) std::fprintf(stderr, "%s\n", stats.dump().c_str());
  } else if (a.stats) {
    std::fprintf(stderr, "stats: %s\n", stats.dump().c_str());
  }
  std::fflush(stdout);
  print_timings(load_s, timings, total_s);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Generate text: chunkwise prefill of the prompt, then O(1)-per-token recurrent decoding");
  add_model_options(cmd, a->model, a->config);
  auto* p = cmd->add_option("--prompt,-p", a->prompt, "Prompt text");
  cmd->add_option("--prompt-file,-f", a->prompt_file, "Read the prompt from a file");
  cmd->add_option("--prompts-file", a->prompts_file,
                  "Decode one prompt per line together as a batch; prints JSON lines. Each "
                  "prompt gets the text it gets alone with the same seed");
  add_checked(cmd, "--max-tokens,-n", a->max_tokens, "Tokens to generate", integer_at_least(0));
  add_checked(cmd, "--temperature,--temp", a->temperature, "Sampling temperature (0: greedy)",
              number_at_least(0));
  add_checked(cmd, "--top-k", a->top_k, "Keep the k most likely tokens (0: all)",
              integer_at_least(0));
  add_checked(cmd, "--top-p", a->top_p, "Keep the smallest set of tokens with this probability",
              number_within(0, 1));
  add_checked(cmd, "--repeat-penalty", a->repeat_penalty,
              "Penalty for recently seen tokens (1: off)", number_above(0));
  add_checked(cmd, "--min-p", a->min_p,
              "Drop tokens less likely than this times the likeliest one (0: off)",
              number_within(0, 1));
  add_checked(cmd, "--presence-penalty", a->presence_penalty,
              "Subtracted from the logit of each recently seen token (0: off)",
              number_within(-2, 2));
  add_checked(cmd, "--frequency-penalty", a->frequency_penalty,
              "Subtracted per occurrence of a recently seen token (0: off)", number_within(-2, 2));
  add_checked(cmd, "--repeat-last-n", a->repeat_last_n, "Recent tokens the penalties look at",
              integer_at_least(0));
  add_checked(cmd, "--seed,-s", a->seed,
              "Sampling seed, 0 to 18446744073709551615 (-1: random, printed with --json)",
              integer_validator(-1, UINT64_MAX));
  cmd->add_option("--stop", a->stop, "Stop before this string (repeatable)");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Keep generating past the end-of-sequence token");
  cmd->add_flag("--no-bos", a->no_bos,
                "Do not put the beginning-of-sequence token before a prompt (it is put there when "
                "the model's tokenizer.json adds it, as Hugging Face does)");
  cmd->add_option("--state-in", a->state_in,
                  "Continue from a saved state (the prompt, possibly empty, is fed on top)");
  cmd->add_option("--state-out", a->state_out,
                  "Save the state after the prompt and the generated text");
  cmd->add_option("--chunk", a->chunk, "Chunk size of the chunkwise prefill (default: config's)")
      ->check(integer_at_least(0));
  add_checked(cmd, "--max-prompt-tokens", a->max_prompt_tokens, "Refuse longer prompts",
              integer_at_least(1));
  add_checked(cmd, "--lookup", a->lookup,
              "Speculative decoding with prompt lookup: draft the tokens that followed the "
              "latest earlier occurrence of the last (up to N) tokens, check them in one pass, "
              "keep what decoding would pick anyway (same text; 0: off)",
              integer_at_least(0));
  cmd->add_option("--draft-model", a->draft_model,
                  "Speculative decoding with a draft model (same vocabulary and tokenizer, loaded "
                  "with --dtype): it drafts tokens ahead, one pass of the model checks them; "
                  "greedy text is the plain one, sampled text has the plain distribution");
  add_checked(cmd, "--draft-max", a->draft_max,
              "Most tokens drafted for one check with --lookup or --draft-model (the count "
              "adapts: grows while drafts are kept, pauses drafting while they are not)",
              integer_at_least(1));
  add_inference_dtype_option(cmd, a->weights);
  add_backend_option(cmd, a->backend);
  add_threads_option(cmd, a->threads,
                     "Threads (default: all cores; decoding a small model uses one)");
  cmd->add_flag("--stats", a->stats,
                "Measure load time and RSS after it, prefill and decode speed, latency by "
                "position, peak RSS, state bytes");
  cmd->add_flag("--no-mmap", a->no_mmap,
                "Copy the weights into packed panels at load instead of using a directory's "
                "tensors where they lie in the mapped files (when stored in the --dtype)");
  cmd->add_flag("--json", a->json, "Print one JSON object instead of streaming text");
  cmd->callback([a, p] {
    a->prompt_given = p->count() > 0;
    run_generate(*a);
  });
}

}  // namespace retnet::cli
