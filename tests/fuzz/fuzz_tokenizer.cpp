// tokenizer.json: load, then encode and decode. The input is the file; its first kilobyte is also
// encoded (with a fixed text that exercises bytes, merges and the added tokens' boundaries), every
// id decoded back, and what loads must serialise and load again to the same vocabulary.
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "retnet/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  const std::string text(fuzz::as_text(data, size));
  fuzz::rejecting_errors([&] {
    const auto tok = make_hf_tokenizer(text, "fuzz tokenizer.json");
    const std::string sample = "Hello, world!\n  caf\xc3\xa9 \xe2\x9c\x93 <s></s> 123\t\xf0\x9f\x98\x80";
    for (const std::string& s : {sample, text.substr(0, 1024)}) {
      fuzz::rejecting_errors([&] {
        const std::vector<int32_t> ids = tok->encode(s);
        for (int32_t id : ids)
          if (id < 0 || id >= tok->vocab_size()) __builtin_trap();  // encode made an invalid id
        tok->decode(ids);
      });
    }
    for (int32_t id = 0; id < std::min<int64_t>(tok->vocab_size(), 512); ++id) tok->token_bytes(id);
    const auto again = tokenizer_from_serialized(tok->kind(), tok->serialize());
    if (again->vocab_size() != tok->vocab_size()) __builtin_trap();
  });
  return 0;
}
