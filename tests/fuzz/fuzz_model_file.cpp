// Model files: the safetensors header and tensor table (SafetensorsFile::open), then the whole
// load as `retnet generate -m FILE` does it, through our float, half and quantised files alike.
#include <vector>

#include "fuzz_common.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/model_io.h"
#include "retnet/model/quant_io.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace retnet;
  if (!fuzz::seed_dir()) return 0;
  const std::string f32 = (fuzz::work_dir() / "seed.safetensors").string();
  save_model(fuzz::tiny_model(), f32);
  fuzz::write_seed("tiny_f32.safetensors", fuzz::read_all(f32));
  for (auto [type, name] : {std::pair{QuantType::Q8_0, "tiny_q8_0"}, {QuantType::Q4_1, "tiny_q4_1"}}) {
    save_quantized_model(fuzz::tiny_model(), f32, type, false);
    fuzz::write_seed(std::string(name) + ".safetensors", fuzz::read_all(f32));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  const std::string path = fuzz::write_file("model.safetensors", fuzz::as_text(data, size));
  fuzz::rejecting_errors([&] {
    const SafetensorsFile file = SafetensorsFile::open(path);
    for (const auto& t : file.tensors()) {
      if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") continue;
      std::vector<float> values(static_cast<size_t>(t.numel()));
      copy_as_float32(t, values.data());
    }
  });
  fuzz::rejecting_errors([&] { load_model(path); });
  // A quantised file loads only for inference; its blocks go to the packed decode weights.
  fuzz::rejecting_errors([&] { load_model_for_inference(path, std::nullopt, DecodePrecision::F32); });
  return 0;
}
