// `retnet bench serve`: `retnet serve` under load, over loopback. N concurrent streaming
// completions against a spawned server: aggregate and per-stream generated tokens/s, time to first
// token and inter-token latency, the server's RSS; the baseline, measured in the same run with its
// repetitions alternated with the server's rounds, is `retnet generate`'s batch-N throughput (the
// same prompts decoded as one batch in-process): its decode steps against the streams' decode (first
// chunk to last), and end to end against the server's aggregate.
// With --soak S: S seconds of mixed streamed and non-streamed requests with random disconnects,
// then checks that nothing failed, every slot is free, and the server's RSS stayed flat.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "bench_common.h"
#include "commands.h"
#include "retnet/core/json_parse.h"
#include "retnet/core/parallel.h"
#include "retnet/infer/generator.h"
#include "retnet/model/model_io.h"
#include "retnet/text/tokenizer.h"
#include "serve_client.h"

namespace retnet::cli {

// The server is this binary: an AddressSanitizer build serves the soak, and its RSS is not judged.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif
namespace {

struct BenchServeOptions {
  std::string model, json, dtype = "f32", backend = "cpu";
  // JSON objects; either non-empty: rounds whose requests carry them alternate with plain rounds
  std::string response_format, speculative;
  // The server's --draft-model: rows marked +dm draft with it, the others turn it off per request.
  std::string draft_model;
  std::string streams = "1,4,16";
  int64_t tokens = 128;
  int reps = 3;
  int threads = 0;
  int server_threads = -1;  // the server's --threads; -1: the same as --threads
  double soak_s = 0;
  int64_t chat_turns = 0;
  int64_t chat_cache_mib = 256;
  int64_t soak_streams = 64;
  double rss_tolerance = 0.05;
  uint64_t seed = 1;
  // A second server reading prompts one per pass (--prefill-batch 1), its rounds alternated with
  // the first's (--prefill-batch 0, batched prefill): rows marked +p1.
  bool batched_prefill = false;
};

std::string prompt_of(int64_t stream, int64_t round) {
  return fmt::format("Stream {} of round {}: once upon a time, ", stream, round);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::lround(p / 100 * static_cast<double>(v.size() - 1)))];
}

std::vector<double> load_average() {
  double l[3] = {0, 0, 0};
  if (getloadavg(l, 3) != 3) return {};
  return {l[0], l[1], l[2]};
}

struct RoundFigures {
  double tokens_per_s = 0, per_stream_tokens_per_s = 0, ttft_p50 = 0, ttft_p95 = 0, itl_p50 = 0,
         itl_p99 = 0;
  // The streams' decode: each stream's tokens after its first chunk over the time from its first
  // chunk to its last, summed over the streams that sent two chunks or more (0: none did). Unlike
  // tokens_per_s it leaves out the requests' start and the prompts' reading (time to first
  // token), as generate's decode figure does.
  double decode_tokens_per_s = 0;
  int64_t generated = 0, failed = 0;
};

// One round: n streams started together, each `tokens` long.
RoundFigures run_round(int port, int64_t n, int64_t tokens, int64_t round,
                       const nlohmann::json& extra_fields = nullptr) {
  std::vector<RequestResult> results(static_cast<size_t>(n));
  std::vector<std::thread> clients;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      RequestOptions o;
      o.prompt = prompt_of(i, round);
      o.max_tokens = tokens;
      o.seed = static_cast<uint64_t>(1000 * round + i);
      o.extra_fields = extra_fields;
      results[static_cast<size_t>(i)] = run_completion(port, o);
    });
  for (auto& c : clients) c.join();
  const double wall = since(t0);
  RoundFigures f;
  std::vector<double> ttft, itl, per_stream;
  for (const auto& r : results) {
    if (!r.ok) {
      ++f.failed;
      continue;
    }
    f.generated += r.generated;
    if (r.arrivals.empty()) continue;
    ttft.push_back(std::chrono::duration<double>(r.arrivals.front() - r.start).count());
    per_stream.push_back(static_cast<double>(r.generated) /
                         std::chrono::duration<double>(r.end - r.start).count());
    // A chunk usually carries one token; spread a gap over the tokens when chunks carry more.
    const double spread =
        r.arrivals.size() > 1 && r.generated > 1
            ? static_cast<double>(r.arrivals.size() - 1) / static_cast<double>(r.generated - 1)
            : 1.0;
    for (size_t k = 1; k < r.arrivals.size(); ++k)
      itl.push_back(std::chrono::duration<double>(r.arrivals[k] - r.arrivals[k - 1]).count() *
                    spread);
    const double decoding =
        std::chrono::duration<double>(r.arrivals.back() - r.arrivals.front()).count();
    if (r.arrivals.size() > 1 && r.generated > 1 && decoding > 0)
      f.decode_tokens_per_s += static_cast<double>(r.generated - 1) / decoding;
  }
  f.tokens_per_s = static_cast<double>(f.generated) / wall;
  f.per_stream_tokens_per_s = percentile(per_stream, 50);
  f.ttft_p50 = percentile(ttft, 50);
  f.ttft_p95 = percentile(ttft, 95);
  f.itl_p50 = percentile(itl, 50);
  f.itl_p99 = percentile(itl, 99);
  return f;
}

// `retnet generate --prompts-file` on the same n prompts, in-process, at batch n: tokens/s of the
// decode steps alone, and end to end (every generated token over prefill plus decode time, what
// the server's aggregate figure counts too: its clock starts before the prompts are read).
struct Baseline {
  double decode_tokens_per_s = 0, end_to_end_tokens_per_s = 0;
};

Baseline generate_baseline(const Model& model, const Tokenizer& tokenizer, int64_t n, int64_t tokens,
                         uint64_t seed) {
  SessionOptions so;
  so.capacity = n;
  Session session(model, so);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < n; ++i) {
    session.add_sequence();
    auto p = tokenizer.encode(prompt_of(i, 0));
    if (tokenizer.adds_bos()) p.insert(p.begin(), tokenizer.bos_id());
    prompts.push_back(std::move(p));
  }
  GenerateOptions go;
  go.max_tokens = tokens;
  go.stop_at_eos = false;
  go.sampling.temperature = 0.8f;
  go.sampling.seed = seed;
  GenerationTimings timings;
  generate(session, tokenizer, prompts, go, &timings);
  return {static_cast<double>(timings.decode_tokens) / timings.decode_s,
          static_cast<double>(n * tokens) / (timings.prefill_s + timings.decode_s)};
}

std::vector<std::string> server_args(const BenchServeOptions& o, int64_t parallel,
                                     int64_t cache_mib = 0,
                                     const std::string& prefill_batch = "auto") {
  return {"--prefill-batch",
          prefill_batch,
          "-m",
          o.model,
          "--parallel",
          std::to_string(parallel),
          "--state-cache-mib",
          std::to_string(cache_mib),
          "--max-tokens",
          std::to_string(std::max<int64_t>(o.tokens, 1) * 4),
          "--max-queue",
          std::to_string(std::max<int64_t>(parallel, 64)),
          "--threads",
          std::to_string(o.server_threads >= 0 ? o.server_threads : o.threads),
          "--dtype",
          o.dtype,
          "--backend",
          o.backend};
}

// The server's arguments with the draft model, if any.
std::vector<std::string> with_draft(std::vector<std::string> args, const BenchServeOptions& o) {
  if (!o.draft_model.empty()) {
    args.push_back("--draft-model");
    args.push_back(o.draft_model);
  }
  return args;
}

void run_throughput(const BenchServeOptions& o, nlohmann::json& out) {
  std::vector<int64_t> counts;
  for (int32_t n : parse_token_list(o.streams)) {
    RETNET_CHECK(n >= 1, "--streams must list counts >= 1, got {}", n);
    counts.push_back(n);
  }
  // The fields of the marked rows' requests: response_format and/or speculative.
  nlohmann::json marked_fields = nullptr;
  if (!o.response_format.empty()) {
    marked_fields["response_format"] = parse_json(o.response_format, "--response-format");
    RETNET_CHECK(marked_fields["response_format"].is_object(),
                 "--response-format must be a JSON object, e.g. {{\"type\": \"json_object\"}}");
  }
  if (!o.speculative.empty()) {
    marked_fields["speculative"] = parse_json(o.speculative, "--speculative");
    RETNET_CHECK(marked_fields["speculative"].is_object(),
                 "--speculative must be a JSON object, e.g. {{\"lookup\": 3}}");
  }
  const bool rf = !o.response_format.empty(), sp = !o.speculative.empty();
  const bool p1 = o.batched_prefill, dm = !o.draft_model.empty();
  RETNET_CHECK(!p1 || (!rf && !sp),
               "--batched-prefill compares two servers on plain requests: not with "
               "--response-format or --speculative");
  RETNET_CHECK(!dm || (!rf && !sp && !p1),
               "--draft-model compares rounds with and without the server's draft model: not "
               "with --response-format, --speculative or --batched-prefill");
  // With the draft model, the rows without a mark turn speculation off per request.
  const nlohmann::json plain_fields =
      dm ? nlohmann::json{{"speculative", {{"lookup", 0}}}} : nlohmann::json(nullptr);
  const char* mark = p1 ? "+p1" : dm ? "+dm" : rf && sp ? "+x" : rf ? "+rf" : "+sp";
  const bool marked_rows = p1 || dm || !marked_fields.is_null();
  const int64_t parallel = *std::max_element(counts.begin(), counts.end());
  apply_threads(o.threads);
  Model model = load_model(o.model);
  prepare_for_inference(model, o.dtype);
  model.use_backend(o.backend);
  auto tokenizer = load_model_tokenizer(o.model);
  ServerProcess server(with_draft(server_args(o, parallel, 0, p1 ? "0" : "auto"), o));
  std::optional<ServerProcess> per_prompt;
  if (p1) per_prompt.emplace(server_args(o, parallel, 0, "1"));
  std::printf(
      "retnet bench serve: %s, %lld tokens per stream, median of %d rounds; baseline: "
      "generate at batch N in-process, same prompts, alternated with the rounds\n"
      "decode: the streams' tokens/s from first chunk to last (summed), against gen decode "
      "(ratio: median of the rounds' ratios); tok/s: every token from the requests' start, "
      "against gen e2e\n",
      o.model.c_str(), static_cast<long long>(o.tokens), o.reps);
  if (!marked_fields.is_null())
    std::printf("rows marked %s: every request with %s, rounds alternated with the rows "
                "without\n",
                mark, marked_fields.dump().c_str());
  if (dm)
    std::printf("rows marked +dm: the server's --draft-model %s drafts for every stream; rows "
                "without a mark: requests with %s; rounds alternated\n",
                o.draft_model.c_str(), plain_fields.dump().c_str());
  if (p1)
    std::printf("rows without a mark: prompts read together (--prefill-batch 0); rows marked "
                "+p1: a second server reading one prompt per pass (--prefill-batch 1), rounds "
                "alternated\n");
  std::printf("%7s %11s %11s %9s %10s %9s %9s %9s %9s %9s %11s %7s %11s %7s\n", "streams",
              "tok/s", "tok/s/str", "decode", "TTFT p50", "TTFT p95", "ITL p50", "ITL p99",
              "RSS MiB", "failed", "gen decode", "ratio", "gen e2e", "ratio");
  // One row: the median round's figures against the generate baseline; `baselines[r]` ran right
  // after `rounds[r]`, so the decode ratio is the median of the per-round ratios.
  // `unmarked`: for a marked row, the rounds without the mark, each run right before the marked
  // round of the same index; their ratio is the median of those pairs'.
  auto report = [&](int64_t n, const std::vector<RoundFigures>& rounds,
                    const std::vector<Baseline>& baselines, bool marked,
                    const std::vector<RoundFigures>* unmarked = nullptr) {
    std::vector<double> tps, decode, gen_decode, gen_e2e, decode_ratios;
    for (size_t r = 0; r < rounds.size(); ++r) {
      tps.push_back(rounds[r].tokens_per_s);
      decode.push_back(rounds[r].decode_tokens_per_s);
      gen_decode.push_back(baselines[r].decode_tokens_per_s);
      gen_e2e.push_back(baselines[r].end_to_end_tokens_per_s);
      decode_ratios.push_back(rounds[r].decode_tokens_per_s / baselines[r].decode_tokens_per_s);
    }
    const Summary s = summarize(tps), d = summarize(decode), b = summarize(gen_decode),
                  e = summarize(gen_e2e), dr = summarize(decode_ratios);
    // The round with the median throughput gives the latency figures.
    const RoundFigures& m = *std::min_element(rounds.begin(), rounds.end(), [&](auto& x, auto& y) {
      return std::abs(x.tokens_per_s - s.median) < std::abs(y.tokens_per_s - s.median);
    });
    int64_t failed = 0;
    for (const auto& f : rounds) failed += f.failed;
    const int64_t rss = (marked && p1 ? *per_prompt : server).rss_bytes();
    std::printf(
        "%4lld%-3s %11.0f %11.1f %9.0f %8.1fms %7.1fms %7.2fms %7.2fms %9.1f %9lld %11.0f %7.2f "
        "%11.0f %7.2f\n",
        static_cast<long long>(n), marked ? mark : "", s.median, m.per_stream_tokens_per_s,
        d.median, 1e3 * m.ttft_p50, 1e3 * m.ttft_p95, 1e3 * m.itl_p50, 1e3 * m.itl_p99,
        rss / 1048576.0, static_cast<long long>(failed), b.median, dr.median, e.median,
        s.median / e.median);
    std::fflush(stdout);
    out["results"].push_back({{"streams", n},
                              {"response_format", marked && rf},
                              {"speculative", marked && sp},
                              {"draft_model", marked && dm},
                              {"prefill_batch", !p1 ? "auto" : marked ? "1" : "0"},
                              {"tokens_per_s", to_json(s)},
                              {"per_stream_tokens_per_s", m.per_stream_tokens_per_s},
                              {"decode_tokens_per_s", to_json(d)},
                              {"decode_ratio_to_generate", to_json(dr)},
                              {"ttft_ms_p50", 1e3 * m.ttft_p50},
                              {"ttft_ms_p95", 1e3 * m.ttft_p95},
                              {"itl_ms_p50", 1e3 * m.itl_p50},
                              {"itl_ms_p99", 1e3 * m.itl_p99},
                              {"server_rss_bytes", rss},
                              {"failed_requests", failed},
                              {"generate_batch_tokens_per_s", to_json(b)},
                              {"ratio_to_generate", s.median / b.median},
                              {"generate_end_to_end_tokens_per_s", to_json(e)},
                              {"ratio_to_generate_end_to_end", s.median / e.median}});
    if (unmarked) {
      std::vector<double> pairs;
      for (size_t r = 0; r < rounds.size(); ++r)
        pairs.push_back(rounds[r].tokens_per_s / (*unmarked)[r].tokens_per_s);
      const Summary pr = summarize(pairs);
      std::printf("%4lld%-3s tok/s against the row without %s: %.2fx (median of the rounds' "
                  "ratios, %.2f-%.2f)\n",
                  static_cast<long long>(n), mark, mark, pr.median, pr.min, pr.max);
      std::fflush(stdout);
      out["results"].back()["ratio_to_unmarked"] = to_json(pr);
    }
    RETNET_CHECK(failed == 0, "{} of the requests at {} streams failed", failed, n);
  };
  int64_t round = 1;
  for (int64_t n : counts) {
    const int marked_port = p1 ? per_prompt->port() : server.port();
    // Warm-up rounds, one of each kind.
    run_round(server.port(), n, std::min<int64_t>(o.tokens, 8), round++, plain_fields);
    if (p1 || dm) run_round(marked_port, n, std::min<int64_t>(o.tokens, 8), round++);
    // The baseline's repetitions alternate with the server's rounds, so that a load that comes and
    // goes during the run weighs on both alike.
    std::vector<RoundFigures> rounds, marked_rounds;
    std::vector<Baseline> baselines;
    for (int r = 0; r < o.reps; ++r) {
      rounds.push_back(run_round(server.port(), n, o.tokens, round++, plain_fields));
      if (marked_rows)
        marked_rounds.push_back(run_round(marked_port, n, o.tokens, round++, marked_fields));
      baselines.push_back(generate_baseline(model, *tokenizer, n, o.tokens, o.seed + r));
    }
    report(n, rounds, baselines, false);
    if (marked_rows) report(n, marked_rounds, baselines, true, &rounds);
  }
  RETNET_CHECK(server.stop() == 0, "the server did not exit cleanly: {}", server.log());
  if (p1)
    RETNET_CHECK(per_prompt->stop() == 0, "the second server did not exit cleanly: {}",
                 per_prompt->log());
}

// Soak: `soak_streams` clients loop until the time is up, each request streamed or not, of a
// random length, and one in four abandoned part-way (a stream closed after a few chunks, a
// non-streamed request given up on by a short read timeout).
void run_soak(const BenchServeOptions& o, nlohmann::json& out) {
  ServerProcess server(server_args(o, o.soak_streams));
  std::printf(
      "retnet bench serve --soak %.0f: %lld clients, mixed streamed/non-streamed, random "
      "disconnects, against %s\n",
      o.soak_s, static_cast<long long>(o.soak_streams), o.model.c_str());
  std::mutex mutex;
  int64_t completed = 0, left = 0, failed = 0, generated = 0;
  std::vector<std::string> errors;
  const auto t0 = Clock::now();
  const auto deadline =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.soak_s));
  std::vector<std::thread> clients;
  for (int64_t c = 0; c < o.soak_streams; ++c)
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(o.seed * 7919 + static_cast<uint64_t>(c));
      for (int64_t k = 0; Clock::now() < deadline; ++k) {
        RequestOptions r;
        r.stream = rng() % 2 == 0;
        r.max_tokens = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * o.tokens));
        r.prompt = prompt_of(c, k) + std::string(rng() % 200, 'x');
        r.seed = rng() >> 1;  // the API takes seeds up to 2^63 - 1
        if (rng() % 4 == 0) {
          if (r.stream)
            r.disconnect_after_chunks = static_cast<int64_t>(rng() % 8);
          else
            r.read_timeout_ms = 1 + static_cast<int64_t>(rng() % 50);
        }
        const RequestResult res = run_completion(server.port(), r);
        std::lock_guard<std::mutex> lock(mutex);
        if (res.ok) {
          ++completed;
          generated += res.generated;
        } else if (res.left) {
          ++left;
        } else {
          ++failed;
          if (errors.size() < 5) errors.push_back(res.error);
        }
      }
    });
  // RSS every second; "flat" compares the last sample with the first after a warm-up quarter
  // (thread stacks and allocator arenas fill up first).
  std::vector<std::pair<double, int64_t>> rss;
  while (Clock::now() < deadline && server.alive()) {
    rss.emplace_back(since(t0), server.rss_bytes());
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  for (auto& c : clients) c.join();
  // Every slot free: abandoned requests must not hold one once the server has noticed.
  bool idle = false;
  for (int i = 0; i < 200 && !idle && server.alive(); ++i) {
    const auto [status, body] = http_get(server.port(), "/slots");
    if (status == 200) {
      idle = true;
      for (const auto& s : nlohmann::json::parse(body)) idle &= s["state"] == "idle";
    }
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const bool alive = server.alive() && http_get(server.port(), "/health").first == 200;
  int64_t base = 0, last = 0;
  for (const auto& [t, bytes] : rss) {
    if (t >= o.soak_s * 0.25 && base == 0) base = bytes;
    last = bytes;
  }
  const double growth = base > 0 ? static_cast<double>(last - base) / static_cast<double>(base) : 0;
  const int exit_status = server.stop();
  std::printf(
      "requests: %lld completed, %lld abandoned by their client, %lld failed; %lld tokens "
      "generated\n",
      static_cast<long long>(completed), static_cast<long long>(left),
      static_cast<long long>(failed), static_cast<long long>(generated));
  for (const auto& e : errors) std::printf("  error: %s\n", e.c_str());
  std::printf(
      "server RSS: %.1f MiB after warm-up, %.1f MiB at the end (%+.1f%%); slots all idle "
      "at the end: %s; alive: %s; exit status after SIGTERM: %d\n",
      base / 1048576.0, last / 1048576.0, 100 * growth, idle ? "yes" : "no", alive ? "yes" : "no",
      exit_status);
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& [t, bytes] : rss) samples.push_back({t, bytes});
  out["soak"] = {
      {"seconds", o.soak_s},       {"clients", o.soak_streams}, {"completed", completed},
      {"abandoned", left},         {"failed", failed},          {"generated_tokens", generated},
      {"rss_after_warmup", base},  {"rss_end", last},           {"rss_growth", growth},
      {"slots_idle_at_end", idle}, {"alive_at_end", alive},     {"exit_status", exit_status},
      {"rss_samples", samples},    {"address_sanitizer", kAddressSanitizer}};
  RETNET_CHECK(alive && exit_status == 0, "the server did not survive the soak: {}", server.log());
  RETNET_CHECK(failed == 0, "{} requests failed during the soak (first: {})", failed,
               errors.empty() ? "" : errors.front());
  RETNET_CHECK(idle, "slots were still busy after the soak");
  RETNET_CHECK(completed > 0, "no request completed during the soak");
  if (kAddressSanitizer) {
    std::printf("RSS growth not checked: an AddressSanitizer build holds freed memory in its "
                "quarantine, so its RSS grows with the requests served\n");
    return;
  }
  RETNET_CHECK(
      growth <= o.rss_tolerance,
      "the server's RSS grew by {:.1f}% during the soak (more than --rss-tolerance {:.1f}%)",
      100 * growth, 100 * o.rss_tolerance);
}

// A chat of --chat-turns turns on one stream, the way a chat client sends it: each turn's prompt
// is the whole conversation so far (earlier prompts and replies) plus a new user line. Run against
// a server with the prompt cache on, then one with it off on the same prompts: per turn, the
// prompt's tokens, those restored from the cache, and the time to first token (the turn's prefill
// cost as a user sees it). The replies must be the same text with the cache on and off.
void run_chat(const BenchServeOptions& o, nlohmann::json& out) {
  RETNET_CHECK(o.chat_turns >= 2, "--chat-turns must be >= 2, got {}", o.chat_turns);
  struct Turn {
    RequestResult on, off;
  };
  std::vector<Turn> turns(static_cast<size_t>(o.chat_turns));
  std::vector<std::string> prompts;
  auto ask = [&](int port, const std::string& prompt, int64_t t) {
    RequestOptions ro;
    ro.prompt = prompt;
    ro.max_tokens = o.tokens;
    ro.seed = o.seed + static_cast<uint64_t>(t);
    RequestResult r = run_completion(port, ro);
    RETNET_CHECK(r.ok && !r.arrivals.empty(), "chat turn {} failed: {}", t + 1, r.error);
    return r;
  };
  {
    ServerProcess server(server_args(o, 1, o.chat_cache_mib));
    std::string conversation;
    for (int64_t t = 0; t < o.chat_turns; ++t) {
      conversation += fmt::format("User: tell me more about part {} of the story.\nAssistant:", t + 1);
      prompts.push_back(conversation);
      turns[static_cast<size_t>(t)].on = ask(server.port(), conversation, t);
      conversation += turns[static_cast<size_t>(t)].on.text + "\n";
    }
    RETNET_CHECK(server.stop() == 0, "the server did not exit cleanly: {}", server.log());
  }
  {
    ServerProcess server(server_args(o, 1, 0));
    for (int64_t t = 0; t < o.chat_turns; ++t)
      turns[static_cast<size_t>(t)].off = ask(server.port(), prompts[static_cast<size_t>(t)], t);
    RETNET_CHECK(server.stop() == 0, "the server did not exit cleanly: {}", server.log());
  }
  std::printf(
      "retnet bench serve --chat-turns %lld: %s, %lld tokens per reply, prompt cache %lld MiB "
      "against none\n",
      static_cast<long long>(o.chat_turns), o.model.c_str(), static_cast<long long>(o.tokens),
      static_cast<long long>(o.chat_cache_mib));
  std::printf("%5s %14s %14s %15s %14s %15s %10s\n", "turn", "prompt tokens", "cached (on)",
              "prefilled (on)", "TTFT on", "TTFT off", "same text");
  auto ttft = [](const RequestResult& r) {
    return std::chrono::duration<double>(r.arrivals.front() - r.start).count();
  };
  for (size_t t = 0; t < turns.size(); ++t) {
    const Turn& x = turns[t];
    const bool same = x.on.text == x.off.text;
    std::printf("%5zu %14lld %14lld %15lld %12.1fms %13.1fms %10s\n", t + 1,
                static_cast<long long>(x.on.prompt_tokens), static_cast<long long>(x.on.cached_tokens),
                static_cast<long long>(x.on.prompt_tokens - x.on.cached_tokens), 1e3 * ttft(x.on),
                1e3 * ttft(x.off), same ? "yes" : "NO");
    out["results"].push_back({{"turn", t + 1},
                              {"prompt_tokens", x.on.prompt_tokens},
                              {"cached_tokens_cache_on", x.on.cached_tokens},
                              {"cached_tokens_cache_off", x.off.cached_tokens},
                              {"ttft_ms_cache_on", 1e3 * ttft(x.on)},
                              {"ttft_ms_cache_off", 1e3 * ttft(x.off)},
                              {"same_text", same}});
    RETNET_CHECK(same, "turn {}: the reply differs with the prompt cache on and off", t + 1);
  }
  std::fflush(stdout);
}

void run(const BenchServeOptions& o) {
  nlohmann::json out = {{"benchmark", "serve"},
                        {"commit", git_commit()},
                        {"machine", machine_json()},
                        {"model", o.model},
                        {"threads", o.threads},
                        {"server_threads", o.server_threads >= 0 ? o.server_threads : o.threads},
                        {"dtype", o.dtype},
                        {"tokens_per_stream", o.tokens},
                        {"load_average_before", load_average()},
                        {"results", nlohmann::json::array()}};
  RETNET_CHECK((o.response_format.empty() && o.speculative.empty() && o.draft_model.empty()) ||
                   (o.soak_s == 0 && o.chat_turns == 0),
               "--response-format, --speculative and --draft-model are for the stream-count runs, "
               "not --soak or --chat-turns");
  if (o.soak_s > 0)
    run_soak(o, out);
  else if (o.chat_turns > 0)
    run_chat(o, out);
  else
    run_throughput(o, out);
  out["load_average_after"] = load_average();
  const auto l = load_average();
  if (!l.empty()) std::printf("load average at the end: %.2f %.2f %.2f\n", l[0], l[1], l[2]);
  if (!o.json.empty()) write_json(o.json, out);
}

}  // namespace

void register_bench_serve(CLI::App* bench) {
  auto [o, cmd] = add_bench_subcommand<BenchServeOptions>(
      bench, "serve",
      "`retnet serve` under load over loopback: N concurrent streams (tokens/s aggregate and per "
      "stream, the streams' decode from first chunk to last, time to first token, inter-token "
      "latency, RSS) against generate's batch-N throughput in the same run, alternated; or "
      "--soak S: mixed requests with random disconnects");
  cmd->add_option("--model,-m", o->model, "Model .safetensors file or directory")->required();
  add_inference_dtype_option(cmd, o->dtype);
  cmd->add_option("--streams", o->streams, "Concurrent stream counts, comma-separated")
      ->capture_default_str();
  add_checked(cmd, "--tokens,-n", o->tokens, "Tokens each stream generates", integer_at_least(1));
  add_bench_run_options(cmd, o->reps, o->threads, o->json);
  add_backend_option(cmd, o->backend);
  cmd->add_option("--server-threads", o->server_threads,
                  "The server's --threads, 0: all cores (default: the same as --threads; the "
                  "generate baseline keeps --threads)")
      ->check(integer_at_least(0));
  add_checked(cmd, "--soak", o->soak_s,
              "Instead: this many seconds of mixed streamed/non-streamed requests with random "
              "disconnects; fails on any error, a busy slot at the end or RSS growth",
              number_above(0));
  cmd->add_option("--chat-turns", o->chat_turns,
                  "Instead: one chat of this many turns (each prompt the whole conversation so "
                  "far), with the prompt cache on and off: per-turn cached tokens and time to "
                  "first token")
      ->check(integer_at_least(2));
  add_checked(cmd, "--chat-cache-mib", o->chat_cache_mib,
              "The prompt cache (--state-cache-mib) of the --chat-turns run", integer_at_least(1));
  add_checked(cmd, "--soak-clients", o->soak_streams, "Concurrent clients of the soak",
              integer_at_least(1));
  add_checked(cmd, "--rss-tolerance", o->rss_tolerance,
              "Largest RSS growth the soak accepts after its first quarter (fraction)",
              number_above(0));
  cmd->add_option("--response-format", o->response_format,
                  "A response_format object (JSON): each stream count runs rounds with it too, "
                  "alternated with rounds without it, in rows marked +rf")
      ->type_name("JSON");
  cmd->add_option("--speculative", o->speculative,
                  "A request's speculative object (JSON, e.g. {\"lookup\": 3}): as "
                  "--response-format, in rows marked +sp (+x with both)")
      ->type_name("JSON");
  cmd->add_option("--draft-model", o->draft_model,
                  "The server's --draft-model: each stream count runs rounds whose streams draft "
                  "with it (rows marked +dm) alternated with rounds whose requests turn "
                  "speculation off ({\"speculative\": {\"lookup\": 0}})");
  cmd->add_flag("--batched-prefill", o->batched_prefill,
                "The server reads the prompts of a round together in batched passes "
                "(--prefill-batch 0), and a second server reading one prompt per pass "
                "(--prefill-batch 1) alternates rounds with it, in rows marked +p1");
  cmd->add_option("--seed,-s", o->seed, "Seed of the requests and the soak's choices")
      ->capture_default_str();
  cmd->callback([o = o] { run(*o); });
}

}  // namespace retnet::cli
