#include <cstdio>

#include "commands.h"
#include "retnet/core/read_file.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_init(CLI::App& app) {
  struct Opts {
    std::string config, out, format, dtype = "f32";
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "init",
      "Write a randomly initialised model (torchscale's init): a .safetensors file, or with "
      "--format a Hugging Face directory (with a byte-level model's tokenizer.json and "
      "tokenizer_config.json); the config may be an fla config.json (e.g. "
      "fla-hub/retnet-1.3B-100B's), which writes an fla directory");
  cmd->add_option("--config", o->config,
                  "Model config JSON (torchscale RetNetConfig names, or a Hugging Face "
                  "config.json of fla or syncdoth); default: the small model");
  cmd->add_option("--out,-o", o->out, "Output .safetensors file, or directory with --format")
      ->required();
  add_directory_options(cmd, o->format, o->dtype,
                        "Write a Hugging Face directory in this layout (default for an fla "
                        "config.json: fla)");
  add_checked(cmd, "--seed,-s", o->seed, "Random seed", integer_at_least(0));
  cmd->callback([o] {
    check_output_not_input(o->out, "output", {{o->config, "config file"}});
    Config config;
    std::string format = o->format;
    int64_t bos = -1, eos = -1;
    if (!o->config.empty()) {
      const std::string text = read_file(o->config, "config file");
      if (is_hf_config(text)) {
        const HfModelConfig hf = parse_hf_config(text, o->config);
        config = hf.config;
        bos = hf.bos_id, eos = hf.eos_id;
        if (format.empty()) format = hf_flavour_name(hf.flavour);
      } else {
        config = Config::from_json(text, o->config);
      }
    }
    Model model = Model::init(config, o->seed);
    if (format.empty()) {
      save_model(model, o->out);
    } else {
      // A byte-level model gets the tokenizer files an export writes for it; another vocabulary
      // is some tokenizer's that a config does not name.
      std::map<std::string, std::string> tokenizer_files;
      if (config.vocab_size == 256)
        tokenizer_files = hf_tokenizer_files(*make_byte_tokenizer(), default_chat_template());
      else
        std::fprintf(stderr,
                     "retnet: note: no tokenizer files written: the vocabulary (%lld) is not the "
                     "256 bytes; put the tokenizer's tokenizer.json beside the model\n",
                     static_cast<long long>(config.vocab_size));
      save_hf_directory(model, o->out, format == "fla" ? HfFlavour::Fla : HfFlavour::Syncdoth,
                        o->dtype, tokenizer_files, bos, eos);
    }
    std::printf("wrote %s: %lld parameters (%s), seed %llu\n", o->out.c_str(),
                static_cast<long long>(model.parameter_count()),
                human_bytes(4.0 * model.parameter_count()).c_str(),
                static_cast<unsigned long long>(o->seed));
  });
}

}  // namespace retnet::cli
