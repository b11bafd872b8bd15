#include <cstdio>

#include "commands.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_logits(CLI::App& app) {
  struct Opts {
    std::string model, config, tokens, mode = "parallel", out;
    int64_t chunk = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "logits", "Logits for every position of a token sequence, as float32 .npy [T, vocab]");
  add_model_options(cmd, o->model, o->config);
  cmd->add_option("--tokens", o->tokens, "Comma-separated token ids, e.g. 5,17,3")->required();
  cmd->add_option("--mode", o->mode, "Form; each mixer has parallel and recurrent, chunkwise all but attention and aft, scan retention only")
      ->check(CLI::IsMember({"parallel", "recurrent", "chunkwise", "scan"}))
      ->capture_default_str();
  cmd->add_option("--chunk", o->chunk, "Chunk size of the chunkwise form (default: the config's)")
      ->check(integer_at_least(0));
  cmd->add_option("--out,-o", o->out, "Output .npy file")->required();
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    apply_threads(o->threads);
    Model model = load_model(o->model, optional_config(o->config));
    std::vector<int32_t> tokens = parse_token_list(o->tokens);
    const int64_t T = static_cast<int64_t>(tokens.size());
    ModelRunner runner(model);
    const std::vector<float> logits = runner.logits(tokens, 1, parse_form(o->mode), o->chunk);
    write_npy(o->out, logits.data(), {T, model.config().vocab_size});
    std::fprintf(stderr, "wrote %s: logits [%lld, %lld], %s form\n", o->out.c_str(), (long long)T,
                 (long long)model.config().vocab_size, o->mode.c_str());
  });
}

}  // namespace retnet::cli
