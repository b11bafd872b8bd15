#include <sys/stat.h>

#include <chrono>
#include <utility>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "retnet/core/process_memory.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_info(CLI::App& app) {
  struct Opts {
    std::string model, config, dtype;
    bool json = false, no_mmap = false;
    int64_t length = 1024;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("info", "Show a model's config, size and recurrent state size");
  cmd->add_option("model", o->model, "Model .safetensors file, or a Hugging Face directory (fla, syncdoth)")->required();
  cmd->add_option("--config-json", o->config, "Config JSON for a file that has none (torchscale)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_option("--length", o->length,
                  "Tokens a sequence has consumed, for its state size (default 1024)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--dtype", o->dtype,
                  "Also prepare the weights for inference in f32, bf16, f16, q8_0, q4_1 or q4_0 "
                  "and report the time and resident memory after it")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0", "q4_0", "q4_1"}));
  cmd->add_flag("--no-mmap", o->no_mmap,
                "With --dtype: copy the weights into packed panels instead of using a "
                "directory's tensors stored in that dtype where they lie in the mapped files");
  cmd->callback([o] {
    LoadInfo li;
    // With --dtype the weights are read straight into the packed copy (part of the load time).
    Model model = o->dtype.empty()
                      ? load_model(o->model, optional_config(o->config), &li)
                      : load_model_for_inference(o->model, optional_config(o->config),
                                                 parse_decode_precision(o->dtype, "--dtype"), &li,
                                                 !o->no_mmap);
    const double rss = static_cast<double>(current_rss_bytes());
    const double peak = static_cast<double>(peak_rss_bytes());
    int64_t file_bytes = 0;
    for (const std::string& f : li.weight_files) {
      struct stat st {};
      if (stat(f.c_str(), &st) == 0) file_bytes += static_cast<int64_t>(st.st_size);
    }
    const Config& c = model.config();
    const int64_t params = model.parameter_count();
    const int64_t state = model.state_bytes_per_sequence();
    // A sequence's whole state at --length tokens: the constant part and the caches' rows.
    const int64_t state_at_length = state + o->length * c.cache_floats_per_token() * 4;
    // A directory may lack a tokenizer this engine reads: say so instead of failing.
    std::unique_ptr<Tokenizer> tokenizer;
    std::string tokenizer_problem;
    try {
      tokenizer = load_model_tokenizer(o->model);
    } catch (const Error& e) {
      tokenizer_problem = e.what();
    }
    // Quantised projections (a quantised file, or --dtype q*): their bits per weight and the
    // bytes of every weight as held (the rest stays float32).
    const bool quantised = model.decode_prepared() &&
                           decode_quant_type(model.decode_precision()).has_value();
    int64_t projection_params = 0;
    for (auto [index, K] : model.projection_tensors())
      projection_params += static_cast<int64_t>(std::as_const(model).params().layout()[index].numel);
    const int64_t held_bytes = model.packed_bytes() + 4 * (params - projection_params);
    const std::string source =
        !li.flavour.empty() ? li.flavour : li.torchscale ? "torchscale" : "retnet";
    if (o->json) {
      nlohmann::ordered_json j;
      j["config"] = nlohmann::json::parse(c.to_json());
      j["parameters"] = params;
      j["parameter_bytes"] = params * 4;
      j["file_bytes"] = file_bytes;
      j["stored_dtype"] = li.source_dtype;
      j["weight_files"] = li.weight_files;
      j["mixer"] = c.mixer_description();
      if (c.hybrid()) {
        std::vector<std::string> names;
        for (int64_t l = 0; l < c.layers; ++l) names.push_back(c.layer_mixer(l).name);
        j["layer_mixers"] = names;
      }
      j["state_bytes_per_sequence"] = state;
      j["cache_bytes_per_token"] = c.cache_floats_per_token() * 4;
      j["state_length"] = o->length;
      j["state_bytes_at_length"] = state_at_length;
      j["source"] = source;
      if (tokenizer)
        j["tokenizer"] = {{"kind", tokenizer->kind()}, {"vocab_size", tokenizer->vocab_size()}};
      else
        j["tokenizer"] = {{"error", tokenizer_problem}};
      j["bos_token_id"] = li.bos_id;
      j["eos_token_id"] = li.eos_id;
      j["memory_mapped"] = li.zero_copy;
      j["load_seconds"] = li.load_seconds;
      if (!o->dtype.empty()) j["open_seconds"] = li.open_seconds;
      j["rss_bytes"] = static_cast<int64_t>(rss);
      j["peak_rss_bytes"] = static_cast<int64_t>(peak);
      if (quantised)
        j["quantization"] = {
            {"type", decode_precision_name(model.decode_precision())},
            {"bits_per_weight", decode_precision_bits(model.decode_precision())},
            {"lm_head", model.head_kept_f32() ? "f32" : decode_precision_name(model.decode_precision())},
            {"projection_bytes", model.packed_bytes()},
            {"weight_bytes", held_bytes},
            {"bits_per_parameter", 8.0 * double(held_bytes) / double(params)}};
      if (!o->dtype.empty())
        j["inference"] = {{"dtype", o->dtype},
                          {"prepare_seconds", li.prepare_seconds},
                          {"packed_weight_bytes", model.packed_bytes()},
                          {"in_place_weight_bytes", model.in_place_bytes()}};
      std::printf("%s\n", j.dump(2).c_str());
      return;
    }
    const std::string layout = !li.flavour.empty() ? li.flavour + " directory, " +
                                                         std::to_string(li.weight_files.size()) +
                                                         " weight file(s)"
                               : li.torchscale ? "torchscale export"
                                               : "retnet format v1";
    std::printf("model:        %s (%s, %s %s)\n", o->model.c_str(), layout.c_str(),
                li.source_dtype.c_str(),
                li.zero_copy                  ? "memory-mapped, zero copy"
                : model.in_place_bytes() > 0  ? "memory-mapped, used in place"
                : quantised                   ? "quantised blocks, the rest float32"
                : !o->dtype.empty()           ? "read into the prepared weights on load"
                                              : "converted to float32 on load");
    if (o->dtype.empty())
      std::printf("loaded in:    %.3f s; resident memory %s (peak %s)\n", li.load_seconds,
                  human_bytes(rss).c_str(), human_bytes(peak).c_str());
    else
      std::printf(
          "loaded in:    %.3f s (open %.3f s, prepare %.3f s), for inference in %s (packed %s, "
          "used in place from the mapped files %s); resident memory %s (peak %s)\n",
          li.load_seconds, li.open_seconds, li.prepare_seconds, o->dtype.c_str(),
          human_bytes(double(model.packed_bytes())).c_str(),
          human_bytes(double(model.in_place_bytes())).c_str(), human_bytes(rss).c_str(),
          human_bytes(peak).c_str());
    std::printf("config:       %s\n", c.to_json().c_str());
    std::printf(
        "layers %lld, d %lld, value dim %lld, heads %lld (d_k %lld, d_v %lld), ffn %lld, "
        "vocab %lld\n",
        (long long)c.layers, (long long)c.embed_dim, (long long)c.value_embed_dim,
        (long long)c.heads, (long long)c.key_dim(), (long long)c.head_value_dim(),
        (long long)c.ffn_dim, (long long)c.vocab_size);
    if (tokenizer)
      std::printf("tokenizer:    %s, %lld tokens\n", tokenizer->kind().c_str(),
                  (long long)tokenizer->vocab_size());
    else
      std::printf("tokenizer:    none (%s)\n", tokenizer_problem.c_str());
    if (li.bos_id >= 0 || li.eos_id >= 0)
      std::printf("bos / eos:    %lld / %lld\n", (long long)li.bos_id, (long long)li.eos_id);
    if (c.hybrid()) {
      std::printf("mixer:        %s; per layer:", c.mixer_description().c_str());
      for (int64_t l = 0; l < c.layers; ++l) std::printf(" %s", c.layer_mixer(l).name);
      std::printf("\n");
    } else {
      std::printf("mixer:        %s (%s)\n", c.mixer->name, c.mixer->summary);
    }
    bool decays = false;
    for (int64_t l = 0; l < c.layers; ++l) decays |= c.layer_mixer(l).decays_by_head;
    if (decays) {
      std::printf("decay gamma:  ");
      for (double g : model.gammas()) std::printf("%.8f ", g);
      std::printf("\n");
    }
    std::printf("parameters:   %lld (%s as float32; stored %s in %s)\n", (long long)params,
                human_bytes(4.0 * params).c_str(), human_bytes(double(li.stored_bytes)).c_str(),
                li.source_dtype.c_str());
    if (quantised)
      std::printf("quantised:    projections in %s (%.1f bits per weight%s): %s; with the float32 "
                  "embedding and norms %s, %.2f bits per parameter\n",
                  decode_precision_name(model.decode_precision()),
                  decode_precision_bits(model.decode_precision()),
                  model.head_kept_f32() ? ", LM head float32" : "",
                  human_bytes(double(model.packed_bytes())).c_str(),
                  human_bytes(double(held_bytes)).c_str(), 8.0 * double(held_bytes) / double(params));
    if (c.cache_floats_per_token() > 0 && state > 0)
      std::printf(
          "state:        %s per sequence constant (%lld floats) plus a cache of %s per token "
          "(the attention layers' keys and values): %s at %lld tokens\n",
          human_bytes(double(state)).c_str(), (long long)c.state_floats_per_sequence(),
          human_bytes(4.0 * c.cache_floats_per_token()).c_str(),
          human_bytes(double(state_at_length)).c_str(), (long long)o->length);
    else if (c.cache_floats_per_token() > 0)
      std::printf(
          "state:        a cache of %s per token per sequence (every earlier key and "
          "value): grows with the sequence; %s at %lld tokens\n",
          human_bytes(4.0 * c.cache_floats_per_token()).c_str(),
          human_bytes(double(state_at_length)).c_str(), (long long)o->length);
    else
      std::printf("state:        %s per sequence (%lld floats), constant in sequence length\n",
                  human_bytes(double(state)).c_str(), (long long)c.state_floats_per_sequence());
  });
}

}  // namespace retnet::cli
