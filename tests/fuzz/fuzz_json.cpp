// parse_json: any bytes; what it accepts must dump back (bounded depth, valid UTF-8).
#include "fuzz_common.h"
#include "retnet/core/json_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  retnet::fuzz::rejecting_errors([&] {
    const auto j = retnet::parse_json(retnet::fuzz::as_text(data, size), "fuzz input");
    const std::string again = j.dump();
    if (retnet::parse_json(again, "dumped") != j) __builtin_trap();  // a round trip changed it
  });
  return 0;
}
