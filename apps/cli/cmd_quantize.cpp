// `retnet quantize IN OUT --type q8_0|q4_0|q4_1 [--keep-head f32]`: a float32 model (file or
// Hugging Face directory) written with its projections in ggml's blocks (docs/quantization.md).
#include <cstdio>

#include "commands.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_quantize(CLI::App& app) {
  struct Opts {
    std::string in, out, config, type, keep_head;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "quantize",
      "Write a model with its projections (q, k, v, g, out, FFN and the LM head) quantised in "
      "blocks of 32 weights: q8_0 (8.5 bits per weight), q4_1 (5) or q4_0 (4.5). Embedding, norms "
      "and decays stay float32. Every command loads the result; --dtype q8_0|q4_0|q4_1 quantises "
      "at load instead");
  cmd->add_option("in", o->in, "Model .safetensors file or Hugging Face directory (float32, "
                               "bf16 or f16 weights)")
      ->required();
  cmd->add_option("out", o->out, "Output .safetensors file (written atomically)")->required();
  cmd->add_option("--config-json", o->config, "Config JSON for a file that has none (torchscale)");
  cmd->add_option("--type", o->type, "Block type: q8_0, q4_0 or q4_1")->required();
  cmd->add_option("--keep-head", o->keep_head, "f32: keep the LM head in float32")
      ->check(CLI::IsMember({"f32"}));
  cmd->callback([o] {
    const QuantType type = parse_quant_type(o->type, "--type");
    check_output_not_input(o->out, "output", {{o->in, "input model"}, {o->config, "config file"}});
    LoadInfo li;
    const Model model = load_model(o->in, optional_config(o->config), &li);
    RETNET_CHECK(model.weights_complete(),
                 "'{}' is already quantised ({}): quantise the float32 model instead", o->in,
                 decode_precision_name(model.decode_precision()));
    const auto tokenizer = load_model_tokenizer(o->in);
    save_quantized_model(model, o->out, type, !o->keep_head.empty(),
                         tokenizer_metadata(*tokenizer));
    LoadInfo written;
    const Model check = load_model(o->out, std::nullopt, &written);
    std::printf("wrote %s: %lld parameters, projections in %s%s, %.1f MB (from %.1f MB %s)\n",
                o->out.c_str(), (long long)model.parameter_count(), quant_type_name(type),
                o->keep_head.empty() ? "" : " (LM head f32)", written.stored_bytes / 1e6,
                li.stored_bytes / 1e6, li.source_dtype.c_str());
  });
}

}  // namespace retnet::cli
