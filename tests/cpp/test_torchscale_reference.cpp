// The official outputs: tests/data/torchscale-small holds logits of torchscale's RetNetDecoder
// itself (parallel, recurrent, chunkwise with chunk 32) on a tiny random model stored under
// torchscale's names. Every form of the engine must match every file (relative 1e-5).
#include <fstream>
#include <iterator>

#include "retnet/core/error.h"
#include "retnet/core/npy.h"
#include "retnet/model/forward.h"
#include "retnet/model/model_io.h"
#include "test_helpers.h"

using namespace retnet;
using retnet::test::close;

namespace {
const std::string kDir = std::string(RETNET_TEST_DATA) + "/torchscale-small/";

std::vector<int32_t> reference_tokens() {
  std::ifstream in(kDir + "tokens.txt");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> tokens;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    tokens.push_back(std::stoi(text.substr(i, j - i)));
    i = j + 1;
  }
  return tokens;
}
}  // namespace

TEST(TorchscaleReference, EveryFormMatchesEveryOfficialForm) {
  LoadInfo info;
  Model model = load_model(kDir + "model.safetensors", Config::from_file(kDir + "config.json"), &info);
  EXPECT_TRUE(info.torchscale);
  EXPECT_EQ(model.config().layernorm_eps, 0.0);
  auto tokens = reference_tokens();
  ASSERT_EQ(tokens.size(), 96u);
  const int64_t T = 96, V = model.config().vocab_size;
  for (Form form : {Form::Parallel, Form::Recurrent,
                             Form::Chunkwise, Form::Scan}) {
    for (int64_t chunk : {32, 7}) {
      if (form != Form::Chunkwise && chunk != 32) continue;
      std::vector<float> logits(T * V);
      ForwardOptions o;
      o.form = form;
      o.chunk = chunk;
      Arena arena;
      forward_logits(model, tokens.data(), 1, T, logits.data(), o, arena);
      for (const char* ref : {"ref_parallel.npy", "ref_recurrent.npy", "ref_chunkwise.npy"}) {
        NpyArray r = read_npy(kDir + ref);
        ASSERT_EQ(r.shape, (std::vector<int64_t>{T, V}));
        EXPECT_TRUE(close(logits, r.data, 1e-5))
            << form_name(form) << " (chunk " << chunk << ") vs " << ref;
      }
    }
  }
}

TEST(TorchscaleReference, RelPosBuffersAreChecked) {
  // The file's retnet_rel_pos.decay disagrees with the paper's decay schedule: a clear error.
  Config c = Config::from_file(kDir + "config.json");
  c.decay = DecaySchedule::Paper;
  EXPECT_THROW(load_model(kDir + "model.safetensors", c), Error);
}
