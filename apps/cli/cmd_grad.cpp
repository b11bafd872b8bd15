// `retnet grad`: the loss and its gradient for one sequence, for checking the engine's backward
// pass against other frameworks (as `logits` does for the forward pass).
#include <cstdio>

#include "commands.h"
#include "retnet/core/safetensors.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_grad(CLI::App& app) {
  auto o = std::make_shared<SequenceCommandOptions>();
  auto* cmd = app.add_subcommand(
      "grad", "Mean next-token cross-entropy of a token sequence and its gradient (.safetensors)");
  add_sequence_options(cmd, *o, "--form", {"parallel", "chunkwise"},
                       "Comma-separated token ids; position t is trained to predict token t+1",
                       "Output .safetensors with one gradient per parameter");
  cmd->callback([o] {
    apply_threads(o->threads);
    check_output_not_input(o->out, "output", {{o->model, "model"}, {o->config, "config file"}});
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
