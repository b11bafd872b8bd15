// Uses the installed engine through retnet.h only: initialise a small model, save and load it,
// compare the parallel and recurrent forms' logits, and generate a few greedy tokens.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "retnet/retnet.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer WORK_DIR\n");
    return 2;
  }
  try {
    retnet::set_num_threads(1);
    const retnet::Config config = retnet::Config::from_json(
        R"({"decoder_layers": 2, "decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
            "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 64, "vocab_size": 256})");
    const std::string path = std::string(argv[1]) + "/consumer.safetensors";
    retnet::save_model(retnet::Model::init(config, 7), path);
    const retnet::Model model = retnet::load_model(path);

    const std::vector<int32_t> tokens = {72, 101, 108, 108, 111};
    retnet::ModelRunner runner(model);
    const std::vector<float> parallel = runner.logits(tokens, 1, retnet::Form::Parallel);
    const std::vector<float> recurrent = runner.logits(tokens, 1, retnet::Form::Recurrent);
    double worst = 0;  // NaN and Inf count as infinitely far
    for (size_t i = 0; i < parallel.size(); ++i) {
      const double d = std::fabs(parallel[i] - recurrent[i]);
      worst = std::isfinite(d) ? std::max(worst, d) : INFINITY;
    }

    retnet::Session session(model);
    session.add_sequence();
    retnet::GenerateOptions options;
    options.max_tokens = 8;
    options.sampling.temperature = 0;
    const auto tokenizer = retnet::make_byte_tokenizer();
    const auto results = retnet::generate(session, *tokenizer, {tokens}, options);
    std::printf("logits %zu, forms differ by %g, generated %lld tokens (%s)\n", parallel.size(),
                worst, static_cast<long long>(results.at(0).generated_tokens),
                results.at(0).finish_reason.c_str());
    return worst <= 1e-4 && results.at(0).generated_tokens == 8 ? 0 : 1;
  } catch (const retnet::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
