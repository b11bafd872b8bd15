// The grammar mask's cost per decode step on a real vocabulary (not part of the build): replays
// outputs token by token through GrammarConstraint (mask, then accept the output's token) and
// times every mask, memoized (interned states and their moves, an allowed set per state) and not
// (every mask advances the states afresh along the whole trie, as before), the two alternated over
// repetitions; prints the median over repetitions of the mean ms per token, and how many
// memoized masks walked the trie.
//   mask_cost TOKENIZER [REPS]   (a tokenizer.json, a SentencePiece .model, a model file or "bytes")
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "retnet/infer/grammar.h"
#include "retnet/infer/structured_output.h"

using namespace retnet;
using ojson = nlohmann::ordered_json;

namespace {

struct Case {
  const char* name;
  ojson request;      // a chat request's structured-output fields
  std::string reply;  // what the model wrote
};

const char* kProse =
    "First Citizen: Before we proceed any further, hear me speak. You are all resolved rather "
    "to die than to famish? Let us kill him, and we'll have corn at our own price. Is't a "
    "verdict? No more talking on't; let it be done: away, away! One word, good citizens. We are "
    "accounted poor citizens, the patricians good.";

std::vector<Case> cases() {
  const ojson schema = ojson::parse(
      R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["name", "n"]})");
  const ojson tools = ojson::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
          "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city", "days"]}}}])");
  return {
      {"json_schema, a long string",
       {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", schema}}}}}},
       std::string("{\"name\": \"") + kProse + "\", \"n\": 42}"},
      {"json_object, short values",
       {{"response_format", {{"type", "json_object"}}}},
       R"({"title": "Coriolanus", "year": 1608, "acts": [1, 2, 3, 4, 5], "tragedy": true})"},
      {"tools auto, a prose reply", {{"tools", tools}, {"tool_choice", "auto"}}, kProse},
      {"tools required, a call",
       {{"tools", tools}, {"tool_choice", "required"}},
       R"({"name": "get_weather", "arguments": {"city": "Rome, by the Capitol", "days": 3}})"},
  };
}

// Mean ms per mask over the reply's tokens; `walks` gets how many masks walked the trie.
double replay(const StructuredOutput& s, const std::shared_ptr<const TokenTrie>& trie,
              const std::vector<int32_t>& tokens, int64_t vocab, bool memoize, int64_t* walks) {
  GrammarConstraint c(s.grammar, trie, memoize);
  std::vector<float> logits(static_cast<size_t>(vocab));
  double total = 0;
  for (int32_t t : tokens) {
    std::fill(logits.begin(), logits.end(), 0.f);
    const auto a = std::chrono::steady_clock::now();
    c.mask(logits.data(), vocab);
    total += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
    if (logits[static_cast<size_t>(t)] != 0.f) {
      std::fprintf(stderr, "token %d was masked: the reply does not fit the grammar\n", t);
      std::exit(1);
    }
    c.accept(t);
  }
  *walks = c.walks();
  return total / static_cast<double>(tokens.size());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: mask_cost TOKENIZER [REPS]\n");
    return 2;
  }
  const auto tok = load_tokenizer(argv[1]);
  const int reps = argc == 3 ? std::atoi(argv[2]) : 5;
  const auto t0 = std::chrono::steady_clock::now();
  const auto trie = std::make_shared<const TokenTrie>(*tok);
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("vocab %lld, trie of %zu nodes built in %.1f ms; %d repetitions\n",
              static_cast<long long>(tok->vocab_size()), trie->nodes().size(), build_ms, reps);
  std::printf("| output | tokens | ms/token, fresh walks | ms/token, memoized | ratio | walks |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Case& k : cases()) {
    const StructuredOutput s = parse_structured_output(k.request, true);
    const std::vector<int32_t> tokens = tok->encode(k.reply);
    std::vector<double> off, on;
    int64_t walks_off = 0, walks_on = 0;
    for (int r = 0; r < reps; ++r) {  // A/B alternated
      off.push_back(replay(s, trie, tokens, tok->vocab_size(), false, &walks_off));
      on.push_back(replay(s, trie, tokens, tok->vocab_size(), true, &walks_on));
    }
    const double a = median(off), b = median(on);
    std::printf("| %s | %zu | %.3f | %.3f | %.1fx | %lld of %zu |\n", k.name, tokens.size(), a, b,
                a / b, static_cast<long long>(walks_on), tokens.size());
  }
}
