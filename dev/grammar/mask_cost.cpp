// The JSON-schema token mask's cost per decode step on a real vocabulary (not part of the build):
// median ms per mask over 30 repetitions, after a warm-up, at three points of an object: before
// it (few tokens allowed), inside a string (most of the vocabulary allowed) and after a number.
//   mask_cost TOKENIZER   (a tokenizer.json, a SentencePiece .model or a model file)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "retnet/infer/grammar.h"
#include "retnet/infer/json_schema.h"

using namespace retnet;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mask_cost TOKENIZER\n");
    return 2;
  }
  const auto tok = load_tokenizer(argv[1]);
  const auto t0 = std::chrono::steady_clock::now();
  const auto trie = std::make_shared<const TokenTrie>(*tok);
  const double build_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("vocab %lld, trie of %zu nodes built in %.1f ms\n",
              static_cast<long long>(tok->vocab_size()), trie->nodes().size(), build_ms);
  const auto grammar = json_schema_grammar(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["name", "n"]})"));
  for (const char* prefix : {"", "{\"name\": \"ab", "{\"name\": \"ab\", \"n\": 1"}) {
    GrammarConstraint c(grammar, trie);
    for (int32_t t : tok->encode(prefix)) c.accept(t);
    std::vector<float> logits(static_cast<size_t>(tok->vocab_size()));
    std::vector<double> ms;
    for (int rep = 0; rep < 31; ++rep) {
      std::fill(logits.begin(), logits.end(), 0.f);
      const auto a = std::chrono::steady_clock::now();
      c.mask(logits.data(), tok->vocab_size());
      const auto b = std::chrono::steady_clock::now();
      if (rep > 0) ms.push_back(std::chrono::duration<double, std::milli>(b - a).count());
    }
    std::sort(ms.begin(), ms.end());
    const auto allowed = std::count(logits.begin(), logits.end(), 0.f);
    std::printf("after '%s': median %.3f ms per mask (min %.3f, max %.3f), %lld tokens allowed\n",
                prefix, ms[ms.size() / 2], ms.front(), ms.back(), static_cast<long long>(allowed));
  }
}
