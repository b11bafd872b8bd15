#include <filesystem>

#include "commands.h"
#include "retnet/core/read_file.h"
#include "retnet/retnet.h"

namespace retnet::cli {
namespace {

// The tokenizer files that travel with an export (see export's help) and the BOS and EOS ids.
struct TokenizerExport {
  std::map<std::string, std::string> files;
  int64_t bos = -1, eos = -1;
};

// A source directory's own files are copied as they are and completed with what it lacks (a
// byte-level model's tokenizer.json, a tokenizer_config.json with the chat template the engine
// uses); a model file gets its recorded tokenizer and the default chat template. A model whose
// vocabulary is not the 256 bytes and that names no tokenizer (torchscale's) gets none.
TokenizerExport tokenizer_export(const std::string& model_path, const Model& model,
                                 const LoadInfo& li) {
  namespace fs = std::filesystem;
  TokenizerExport out{{}, li.bos_id, li.eos_id};
  auto note = [&](const std::string& what) {
    std::fprintf(stderr, "retnet: note: %s\n", what.c_str());
    return out;
  };
  const bool directory = fs::is_directory(model_path);
  const bool bytes_vocab = model.config().vocab_size == 256;
  bool has_tokenizer = !directory;
  if (directory) {
    for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                             "special_tokens_map.json", "chat_template.jinja"})
      if (fs::exists(fs::path(model_path) / name))
        out.files[name] = read_file((fs::path(model_path) / name).string(), "tokenizer file");
    has_tokenizer = out.files.count("tokenizer.json") || out.files.count("tokenizer.model");
    if (has_tokenizer && out.files.count("tokenizer_config.json")) return out;
    if (!has_tokenizer && !bytes_vocab)
      return note(
          fmt::format("'{}' has no tokenizer file and its vocabulary is not the 256 "
                      "bytes: no tokenizer files written",
                      model_path));
  }
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_model_tokenizer(model_path);
  } catch (const Error& e) {
    if (!directory) throw;
    // Its own files are copied all the same; only the written config needs to read them.
    return note(fmt::format("no tokenizer_config.json written: {}", e.what()));
  }
  if (tokenizer->kind() == "bytes" && !bytes_vocab)
    return note(
        fmt::format("'{}' records no tokenizer and its vocabulary is not the 256 bytes: "
                    "no tokenizer files written",
                    model_path));
  if (out.bos < 0) out.bos = tokenizer->bos_id();  // a model file records no ids of its own
  if (out.eos < 0) out.eos = tokenizer->eos_id();
  const std::string chat_template =
      directory ? load_chat_template(model_path, "").source : default_chat_template();
  for (auto& [name, bytes] : hf_tokenizer_files(*tokenizer, chat_template))
    out.files.emplace(name, std::move(bytes));  // never replaces the directory's own
  return out;
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
      "layout: config.json, model.safetensors, generation_config.json (bos/eos/pad_token_id "
      "where known), tokenizer.json (the model's own; for a byte-level model one that encodes "
      "each byte as its id) or a SentencePiece model's tokenizer.model, and "
      "tokenizer_config.json (special tokens and the chat template); a source directory's own "
      "tokenizer files, special_tokens_map.json and chat_template.jinja are copied as they are "
      "(a model that records no tokenizer and whose vocabulary is not the 256 bytes gets none); "
      "each file is written atomically. "
      "fla holds models with fla's options (rotary half_split, normalize_scores false, ...); "
      "syncdoth holds torchscale-style ones; a model the layout cannot express is refused, "
      "naming the option");
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
    const TokenizerExport t = tokenizer_export(o->model, model, li);
    save_hf_directory(model, o->out, flavour, o->dtype, t.files, t.bos, t.eos, li.pad_id);
    std::printf("wrote %s (%s layout, %s, %lld parameters)\n", o->out.c_str(), o->format.c_str(),
                o->dtype.c_str(), (long long)model.parameter_count());
  });
}

}  // namespace retnet::cli
