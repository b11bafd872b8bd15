#include <cstdio>

#include "commands.h"
#include "retnet/core/npy.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_logits(CLI::App& app) {
  auto o = std::make_shared<SequenceCommandOptions>();
  auto dtype = std::make_shared<std::string>("f32");
  auto* cmd = app.add_subcommand(
      "logits", "Logits for every position of a token sequence, as float32 .npy [T, vocab]");
  add_sequence_options(cmd, *o, "--mode", {"parallel", "recurrent", "chunkwise", "scan"},
                       "Comma-separated token ids, e.g. 5,17,3", "Output .npy file");
  add_inference_dtype_option(cmd, *dtype);
  add_backend_option(cmd, o->backend);
  cmd->callback([o, dtype] {
    apply_threads(o->threads);
    check_output_not_input(o->out, "output", {{o->model, "model"}, {o->config, "config file"}});
    Model model = load_for_inference(o->model, o->config, *dtype, /*only_if_half=*/true);
    model.use_backend(o->backend);
    std::vector<int32_t> tokens = parse_token_list(o->tokens);
    const int64_t T = static_cast<int64_t>(tokens.size());
    ModelRunner runner(model);
    const std::vector<float> logits = runner.logits(tokens, 1, parse_form(o->form), o->chunk);
    write_npy(o->out, logits.data(), {T, model.config().vocab_size});
    std::fprintf(stderr, "wrote %s: logits [%lld, %lld], %s form\n", o->out.c_str(), (long long)T,
                 (long long)model.config().vocab_size, o->form.c_str());
  });
}

}  // namespace retnet::cli
