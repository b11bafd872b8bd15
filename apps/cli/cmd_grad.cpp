// `retnet grad`: the loss and its gradient for one sequence, for checking the engine's backward
// pass against other frameworks (as `logits` does for the forward pass).
#include <cstdio>

#include "commands.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_grad(CLI::App& app) {
  struct Opts {
    std::string model, config, tokens, form = "parallel", out;
    int64_t chunk = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "grad", "Mean next-token cross-entropy of a token sequence and its gradient (.safetensors)");
  add_model_options(cmd, o->model, o->config);
  cmd->add_option("--tokens", o->tokens,
                  "Comma-separated token ids; position t is trained to predict token t+1")
      ->required();
  add_checked(cmd, "--form", o->form, "Training form", CLI::IsMember({"parallel", "chunkwise"}));
  cmd->add_option("--chunk", o->chunk, "Chunk size of the chunkwise form (default: the config's)")
      ->check(integer_at_least(0));
  cmd->add_option("--out,-o", o->out, "Output .safetensors with one gradient per parameter")
      ->required();
  add_threads_option(cmd, o->threads);
  cmd->callback([o] {
    apply_threads(o->threads);
    Model model = load_model(o->model, optional_config(o->config));
    std::vector<int32_t> seq = parse_token_list(o->tokens);
    RETNET_CHECK(seq.size() >= 2, "--tokens needs at least 2 ids (inputs and next-token targets)");
    const int64_t T = static_cast<int64_t>(seq.size()) - 1;
    std::vector<int32_t> inputs(seq.begin(), seq.end() - 1), targets(seq.begin() + 1, seq.end());
    ParamBuffer grads(model.params().layout());
    ModelRunner runner(model);
    const double loss = runner.loss(inputs, targets, 1, parse_form(o->form), o->chunk, &grads);
    std::vector<TensorToWrite> out;
    const auto& layout = grads.layout();
    for (size_t i = 0; i < layout.size(); ++i)
      out.push_back({layout[i].name, layout[i].shape, grads.tensor(i)});
    write_safetensors(o->out, out, {{"loss", fmt::format("{:.17g}", loss)}});
    std::printf("loss %.9f nats/token over %lld tokens; gradient written to %s\n", loss,
                static_cast<long long>(T), o->out.c_str());
  });
}

}  // namespace retnet::cli
