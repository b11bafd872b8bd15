// Model configs in every dialect: ours and torchscale's names (Config::from_json), and the
// Hugging Face config.json of fla's and syncdoth's RetNets (parse_hf_config). What parses must
// validate or be refused, and survive a round trip through our own JSON.
#include "fuzz_common.h"
#include "retnet/model/hf_directory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  const std::string text(fuzz::as_text(data, size));
  fuzz::rejecting_errors([&] {
    const Config c = Config::from_json(text, "fuzz config");
    c.validate();
    Config::from_json(c.to_json(), "round trip").validate();
  });
  fuzz::rejecting_errors([&] {
    if (!is_hf_config(text)) return;
    const HfModelConfig h = parse_hf_config(text, "fuzz config.json");
    h.config.validate();
  });
  return 0;
}
