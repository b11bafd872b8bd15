// parse_gbnf: any bytes as a grammar; what parses must run: a recognizer over a few bytes of the
// input itself (the grammar's bounds keep both small).
#include "fuzz_common.h"
#include "retnet/infer/gbnf.h"
#include "retnet/infer/grammar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  retnet::fuzz::rejecting_errors([&] {
    const std::string text(retnet::fuzz::as_text(data, size));
    const auto grammar = retnet::parse_gbnf(text);
    retnet::GrammarRecognizer(grammar).matches(text.substr(0, 64));
  });
  return 0;
}
