#include <filesystem>

#include "commands.h"
#include "retnet/core/read_file.h"
#include "retnet/retnet.h"

namespace retnet::cli {
namespace {

// The tokenizer files that travel with an export: a source directory's own files, or the
// SentencePiece model a model file records (byte-level needs none).
std::map<std::string, std::string> tokenizer_files(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> files;
  if (fs::is_directory(model_path)) {
    for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                             "special_tokens_map.json"})
      if (fs::exists(fs::path(model_path) / name))
        files[name] = read_file((fs::path(model_path) / name).string(), "tokenizer file");
    return files;
  }
  const auto tokenizer = load_model_tokenizer(model_path);
  if (tokenizer->kind() == "sentencepiece") files["tokenizer.model"] = tokenizer->serialize();
  return files;
}

}  // namespace

void register_export(CLI::App& app) {
  struct Opts {
    std::string model, config, format, out, dtype = "f32";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "export",
      "Write a model as a Hugging Face directory in flash-linear-attention's (fla) or syncdoth's "
      "layout: config.json, model.safetensors, generation_config.json and the tokenizer. fla "
      "holds models with fla's options (rotary half_split, normalize_scores false, ...); syncdoth "
      "holds torchscale-style ones; a model the layout cannot express is refused, naming the "
      "option");
  cmd->add_option("model", o->model, "Model .safetensors file or Hugging Face directory")
      ->required();
  cmd->add_option("--config-json", o->config, "Config JSON for a file that has none (torchscale)");
  add_directory_options(cmd, o->format, o->dtype, "Layout of the directory")->required();
  cmd->add_option("--out,-o", o->out, "Output directory (created; files replaced atomically)")
      ->required();
  cmd->callback([o] {
    namespace fs = std::filesystem;
    // The export writes and replaces files in --out: an input there would be destroyed.
    for (const auto& [input, what] : {std::pair{o->model, "model"}, {o->config, "config file"}}) {
      if (input.empty()) continue;
      check_not_same_file(o->out, "output directory", input, what);
      std::error_code ec;
      if (fs::is_directory(input, ec)) continue;  // a directory's own files are never written
      const fs::path parent = fs::absolute(input).parent_path();
      RETNET_CHECK(!same_file(o->out, parent.string()),
                   "the output directory '{}' holds the {} '{}'; the export would replace it; give "
                   "another --out",
                   o->out, what, input);
    }
    LoadInfo li;
    const Model model = load_model(o->model, optional_config(o->config), &li);
    const HfFlavour flavour = o->format == "fla" ? HfFlavour::Fla : HfFlavour::Syncdoth;
    save_hf_directory(model, o->out, flavour, o->dtype, tokenizer_files(o->model), li.bos_id,
                      li.eos_id);
    std::printf("wrote %s (%s layout, %s, %lld parameters)\n", o->out.c_str(), o->format.c_str(),
                o->dtype.c_str(), (long long)model.parameter_count());
  });
}

}  // namespace retnet::cli
