// `retnet bench speculative --benefit`: what speculative decoding gains on trained models. Each
// prompt of the set is decoded plainly, with prompt lookup and with the draft model, the modes
// alternated within the run (their order rotates per repetition), and each mode's tokens/s is
// set against plain decoding's on the same prompts.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench_common.h"
#include "commands.h"
#include "retnet/core/parallel.h"
#include "retnet/core/read_file.h"
#include "retnet/infer/draft_model.h"
#include "retnet/retnet.h"
#include "speculative_benefit.h"

namespace retnet::cli {
namespace {

// A line's end at or after `at` (the index after its '\n'), or the text's end.
size_t after_line(const std::string& text, size_t at) {
  const size_t nl = text.find('\n', std::min(at, text.size()));
  return nl == std::string::npos ? text.size() : nl + 1;
}

// `bytes` of `text` from `start`, extended to the end of the line they stop in.
std::string stretch(const std::string& text, size_t start, int64_t bytes) {
  const size_t end = after_line(text, start + static_cast<size_t>(bytes));
  return text.substr(start, end - start);
}

// The start of `passage` restated with small changes, as a person quoting it from memory would:
// about its first quarter, cut at a space, with its first comma made a semicolon and one word
// left out. The text the model should then go on copying is the passage after that start.
std::string restated_start(const std::string& passage) {
  size_t cut = passage.rfind(' ', passage.size() / 4);
  if (cut == std::string::npos || cut == 0) cut = passage.size() / 4;
  std::string start = passage.substr(0, cut + 1);
  if (const size_t comma = start.find(','); comma != std::string::npos) start[comma] = ';';
  // Leave out the third word that is letters only (never the speaker's name on the first line).
  int words = 0;
  for (size_t i = 0; i < start.size();) {
    const size_t space = start.find(' ', i);
    if (space == std::string::npos) break;
    const bool letters =
        space > i && std::all_of(start.begin() + i, start.begin() + space,
                                 [](unsigned char c) { return std::isalpha(c) != 0; });
    if (letters && ++words == 3) {
      start.erase(i, space - i + 1);
      break;
    }
    i = space + 1;
  }
  return start;
}

}  // namespace

std::vector<BenefitPrompt> benefit_prompts(const std::string& corpus, int64_t per_kind,
                                           int64_t prompt_bytes) {
  RETNET_CHECK(per_kind >= 1, "--prompts must be >= 1, got {}", per_kind);
  RETNET_CHECK(prompt_bytes >= 16, "--prompt-bytes must be >= 16, got {}", prompt_bytes);
  // The validation split `retnet train` holds out: the last 10%, from a line start.
  const std::string val = corpus.substr(after_line(corpus, corpus.size() - corpus.size() / 10));
  RETNET_CHECK(static_cast<int64_t>(val.size()) >= 4 * prompt_bytes,
               "--data: its validation split (last 10%) holds {} bytes, too few for prompts of "
               "{} bytes (needs {})",
               val.size(), prompt_bytes, 4 * prompt_bytes);
  // 2 x per_kind stretches spread evenly over the split, each from a line start; plain prompts
  // take the even ones, copy-heavy the odd ones, so no two prompts hold the same text.
  const size_t span = val.size() - static_cast<size_t>(2 * prompt_bytes);
  std::vector<BenefitPrompt> out;
  for (int64_t i = 0; i < 2 * per_kind; ++i) {
    size_t start = span * static_cast<size_t>(i) / static_cast<size_t>(2 * per_kind);
    if (start > 0) start = after_line(val, start - 1);
    const std::string text = stretch(val, start, prompt_bytes);
    if (i % 2 == 0) {
      out.push_back({"plain", text});
    } else {
      out.push_back(
          {"copy", text + "\nOnce more, the same words as before:\n\n" + restated_start(text)});
    }
  }
  std::stable_partition(out.begin(), out.end(),
                        [](const BenefitPrompt& p) { return p.kind == "plain"; });
  return out;
}

namespace {

struct ModeRun {
  double decode_s = 0;   // after the prompt is read (the draft's prompt not counted: prefill)
  double total_s = 0;    // the whole generation, prompts read included
  double prefill_s = 0;  // the prompt through the target, and through the draft for "draft"
  int64_t generated = 0, checks = 0, drafted = 0, accepted = 0;
  std::string text;
};

ModeRun decode_once(const Model& target, const Tokenizer& tokenizer,
                    const std::vector<int32_t>& prompt, const std::string& mode, const Model* draft,
                    const SpeculativeBenefitOptions& o, int64_t tokens) {
  Session session(target);
  session.add_sequence();
  GenerateOptions go;
  go.max_tokens = tokens;
  go.stop_at_eos = false;  // every mode generates the same count
  go.sampling.temperature = o.temperature;
  go.sampling.seed = o.seed;
  go.speculative.draft_max = o.draft_max;
  if (mode == "lookup") go.speculative.lookup = o.lookup;
  if (mode == "draft") go.speculative.draft_model = draft;
  GenerationTimings tm;
  const auto t0 = Clock::now();
  const std::vector<SequenceResult> r = generate(session, tokenizer, {prompt}, go, &tm);
  ModeRun m;
  m.total_s = since(t0);
  m.prefill_s = tm.prefill_s;
  m.decode_s = m.total_s - tm.prefill_s;
  m.generated = r[0].generated_tokens;
  m.checks = tm.checks;
  m.drafted = tm.drafted_tokens;
  m.accepted = tm.accepted_tokens;
  m.text = r[0].text;
  return m;
}

double median_of(std::vector<double> v) { return summarize(std::move(v)).median; }

// The speed of `mode` against plain decoding: per repetition, plain's decode seconds over the
// mode's summed over `prompts` (the two ran back to back, modes alternated), then the median of
// those ratios. Pairing runs that were close in time cancels the slow swings of a shared
// machine's speed, which a ratio of two separate medians keeps.
double paired_ratio(const std::vector<std::vector<std::vector<ModeRun>>>& runs,
                    const std::vector<size_t>& prompts, size_t mode) {
  std::vector<double> ratios;
  for (size_t rep = 0; rep < runs[prompts.at(0)][0].size(); ++rep) {
    double plain_s = 0, mode_s = 0;
    for (size_t p : prompts) {
      plain_s += runs[p][0][rep].decode_s;
      mode_s += runs[p][mode][rep].decode_s;
    }
    ratios.push_back(plain_s / mode_s);
  }
  return median_of(std::move(ratios));
}

std::vector<double> load_average_now() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return {};
  return {l[0], l[1], l[2]};
}

// One target: every prompt in every mode, `reps` times, modes alternated.
nlohmann::ordered_json bench_target(const std::string& path, const Model* draft,
                                    const Tokenizer* draft_tokenizer,
                                    const std::vector<BenefitPrompt>& prompts,
                                    const std::vector<std::string>& modes,
                                    const SpeculativeBenefitOptions& o) {
  Model target = load_for_inference(path, "", o.dtype);
  target.use_backend(o.backend);
  const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(path);
  if (draft)
    check_draft_matches(*draft, *draft_tokenizer, fmt::format("--draft '{}'", o.draft), target,
                        *tokenizer, fmt::format("the --target '{}'", path));
  std::vector<std::vector<int32_t>> ids;
  for (const BenefitPrompt& p : prompts) {
    ids.push_back(tokenizer->encode(p.text));
    if (tokenizer->adds_bos()) ids.back().insert(ids.back().begin(), tokenizer->bos_id());
  }
  std::printf("\ntarget %s: %.1fM parameters\n", path.c_str(), target.parameter_count() / 1e6);
  std::fflush(stdout);
  // Warm-up: the weights paged in and the threads started before any timed run.
  for (const std::string& mode : modes) decode_once(target, *tokenizer, ids[0], mode, draft, o, 16);

  const size_t P = prompts.size(), M = modes.size();
  // runs[p][m][rep]
  std::vector<std::vector<std::vector<ModeRun>>> runs(P, std::vector<std::vector<ModeRun>>(M));
  for (int rep = 0; rep < o.reps; ++rep)
    for (size_t p = 0; p < P; ++p)
      for (size_t j = 0; j < M; ++j) {
        const size_t m = (j + static_cast<size_t>(rep) + p) % M;  // rotated order
        runs[p][m].push_back(decode_once(target, *tokenizer, ids[p], modes[m], draft, o, o.tokens));
      }

  nlohmann::ordered_json out = {
      {"model", path},
      {"parameters", target.parameter_count()},
      {"config", nlohmann::ordered_json::parse(target.config().to_json())}};
  int64_t differing = 0;
  // Per prompt: each mode's median decode seconds, its paired ratio to plain, tokens, and its text
  // against plain's.
  std::vector<std::vector<double>> median_s(P, std::vector<double>(M)),
      ratio(P, std::vector<double>(M));
  for (size_t p = 0; p < P; ++p) {
    nlohmann::ordered_json jp = {
        {"kind", prompts[p].kind}, {"prompt_tokens", ids[p].size()}, {"prompt", prompts[p].text}};
    for (size_t m = 0; m < M; ++m) {
      std::vector<double> s, total, prefill;
      int64_t checks = 0, drafted = 0, accepted = 0;
      for (const ModeRun& r : runs[p][m]) {
        s.push_back(r.decode_s);
        total.push_back(r.total_s);
        prefill.push_back(r.prefill_s);
        checks += r.checks;
        drafted += r.drafted;
        accepted += r.accepted;
      }
      median_s[p][m] = median_of(s);
      ratio[p][m] = paired_ratio(runs, {p}, m);
      const ModeRun& first = runs[p][m][0];
      const bool same_text = first.text == runs[p][0][0].text;
      if (o.temperature == 0 && !same_text) ++differing;
      jp["modes"][modes[m]] = {
          {"generated", first.generated},
          {"decode_s", s},
          {"total_s", total},
          {"prefill_s", prefill},
          {"tokens_per_s", static_cast<double>(first.generated) / median_s[p][m]},
          {"ratio_to_plain", ratio[p][m]},
          {"checks", checks},
          {"drafted_tokens", drafted},
          {"accepted_tokens", accepted},
          {"text_same_as_plain", same_text},
          {"text", first.text}};
    }
    out["prompts"].push_back(jp);
  }

  std::printf("%-6s %-7s %8s %10s %7s %9s %9s %9s %7s\n", "kind", "mode", "prompts", "tok/s",
              "ratio", "min ratio", "accepted", "mean len", "checks");
  for (const std::string kind : {"plain", "copy"}) {
    nlohmann::ordered_json jk = {{"kind", kind}};
    std::vector<size_t> of_kind;
    for (size_t p = 0; p < P; ++p)
      if (prompts[p].kind == kind) of_kind.push_back(p);
    if (of_kind.empty()) continue;
    for (size_t m = 0; m < M; ++m) {
      double seconds = 0, min_ratio = 1e300;
      int64_t generated = 0, checks = 0, drafted = 0, accepted = 0;
      const int64_t count = static_cast<int64_t>(of_kind.size());
      for (size_t p : of_kind) {
        seconds += median_s[p][m];
        generated += runs[p][m][0].generated;
        min_ratio = std::min(min_ratio, ratio[p][m]);
        for (const ModeRun& r : runs[p][m]) {
          checks += r.checks;
          drafted += r.drafted;
          accepted += r.accepted;
        }
      }
      const double kind_ratio = paired_ratio(runs, of_kind, m);
      const double acceptance = drafted ? static_cast<double>(accepted) / drafted : 0.0;
      const double mean_len = checks ? static_cast<double>(accepted) / checks : 0.0;
      std::printf("%-6s %-7s %8lld %10.1f %6.2fx %8.2fx %8.1f%% %9.2f %7lld\n", kind.c_str(),
                  modes[m].c_str(), (long long)count, generated / seconds, kind_ratio, min_ratio,
                  100 * acceptance, mean_len, (long long)checks);
      jk["modes"].push_back({{"mode", modes[m]},
                             {"prompts", count},
                             {"tokens_per_s", generated / seconds},
                             {"ratio_to_plain", kind_ratio},
                             {"min_prompt_ratio", min_ratio},
                             {"acceptance_rate", acceptance},
                             {"mean_accepted_length", mean_len},
                             {"checks", checks},
                             {"drafted_tokens", drafted},
                             {"accepted_tokens", accepted}});
    }
    out["kinds"].push_back(jk);
  }
  out["greedy_texts_differing_from_plain"] = differing;
  if (differing > 0)
    std::printf("warning: %lld greedy speculative texts differ from plain decoding's\n",
                (long long)differing);
  std::fflush(stdout);
  return out;
}

}  // namespace

void run_bench_speculative_benefit(const SpeculativeBenefitOptions& o) {
  RETNET_CHECK(!o.targets.empty(), "--benefit needs at least one --target model");
  apply_threads(o.threads);
  const std::vector<BenefitPrompt> prompts =
      benefit_prompts(read_file(o.data, "--data"), o.prompts, o.prompt_bytes);
  std::optional<Model> draft;
  std::unique_ptr<Tokenizer> draft_tokenizer;
  std::vector<std::string> modes = {"plain", "lookup"};
  if (!o.draft.empty()) {
    draft.emplace(load_for_inference(o.draft, "", o.dtype));
    draft->use_backend(o.backend);
    draft_tokenizer = load_model_tokenizer(o.draft);
    modes.push_back("draft");
  }
  nlohmann::ordered_json out = {{"commit", git_commit()},
                                {"machine", machine_json()},
                                {"threads", num_threads()},
                                {"load_average_before", load_average_now()},
                                {"draft", o.draft.empty() ? nlohmann::ordered_json(nullptr)
                                                          : nlohmann::ordered_json(o.draft)},
                                {"draft_parameters", draft ? draft->parameter_count() : 0},
                                {"data", o.data},
                                {"dtype", o.dtype},
                                {"prompts_per_kind", o.prompts},
                                {"prompt_bytes", o.prompt_bytes},
                                {"tokens", o.tokens},
                                {"lookup", o.lookup},
                                {"draft_max", o.draft_max},
                                {"temperature", o.temperature},
                                {"seed", o.seed},
                                {"repetitions", o.reps}};
  std::printf(
      "retnet bench speculative --benefit: machine %s, %d threads; %lld prompts of each kind, "
      "%lld tokens each, %s; lookup %lld, draft max %lld%s%s; %d repetitions, modes alternated; "
      "tok/s of decoding after the prompt is read (medians); ratio: plain decoding's time over "
      "the mode's for the same prompts in one repetition (run back to back), median over "
      "repetitions; accepted: drafted tokens kept; mean len: kept per check\n",
      out["machine"]["cpu"].get<std::string>().c_str(), num_threads(), (long long)o.prompts,
      (long long)o.tokens, o.temperature == 0 ? "greedy" : "sampled", (long long)o.lookup,
      (long long)o.draft_max, o.draft.empty() ? "" : "; draft ", o.draft.c_str(), o.reps);
  std::fflush(stdout);
  for (const std::string& target : o.targets)
    out["targets"].push_back(
        bench_target(target, draft ? &*draft : nullptr, draft_tokenizer.get(), prompts, modes, o));
  out["load_average_after"] = load_average_now();
  if (!o.json.empty()) write_json(o.json, out);
}

}  // namespace retnet::cli
