// State files (`generate --state-in`), checked against the tiny model. The input is everything
// but the checksum, which the harness appends, so that the fuzzer gets past it to the header and
// payload sizes instead of spending every run on a checksum mismatch.
#include <string>

#include "fuzz_common.h"
#include "retnet/core/hash.h"
#include "retnet/infer/state_file.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace retnet;
  if (!fuzz::seed_dir()) return 0;
  const Model& model = fuzz::tiny_model();
  SavedSequence s;
  s.position = 3;
  s.state.assign(static_cast<size_t>(model.config().state_floats_per_sequence()), 0.25f);
  s.logits.assign(static_cast<size_t>(model.config().vocab_size), -1.0f);
  s.recent = {7, 10, 33};
  s.text_tail = "\xe2\x9c";
  const std::string path = (fuzz::work_dir() / "seed.state").string();
  write_state_file(path, model, model_fingerprint(model), s);
  const std::string bytes = fuzz::read_all(path);
  fuzz::write_seed("tiny.state", bytes.substr(0, bytes.size() - sizeof(uint64_t)));  // no checksum
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace retnet;
  std::string bytes(fuzz::as_text(data, size));
  const uint64_t sum = fnv1a(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  const std::string path = fuzz::write_file("fuzz.state", bytes);
  const Model& model = fuzz::tiny_model();
  fuzz::rejecting_errors([&] { read_state_file(path, model, model_fingerprint(model)); });
  return 0;
}
