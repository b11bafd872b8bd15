#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "commands.h"
#include "retnet/retnet.h"

namespace retnet::cli {

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> tokens;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    RETNET_CHECK(!item.empty(), "--tokens: empty item at character {} of '{}'", i,
                 text.substr(0, 64));
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    RETNET_CHECK(end && *end == '\0' && errno == 0 && v >= INT32_MIN && v <= INT32_MAX,
                 "--tokens: '{}' is not a token id (expected comma-separated integers)",
                 item.substr(0, 32));
    tokens.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  return tokens;
}

void apply_threads(int threads) { set_num_threads(threads); }


void add_model_options(CLI::App* cmd, std::string& model, std::string& config_json) {
  cmd->add_option("--model,-m", model,
                  "Model .safetensors file, or a Hugging Face directory (fla, syncdoth)")
      ->required();
  cmd->add_option("--config-json", config_json,
                  "Config JSON (torchscale names) for a file that has none, e.g. a torchscale "
                  "export");
}

CLI::Option* add_backend_option(CLI::App* cmd, std::string& backend) {
  return cmd
      ->add_option("--backend", backend,
                   "What the model's passes run on: cpu (the engine's kernels) or reference "
                   "(plain scalar code, slow: to check results against)")
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
}

// The weight types inference reads.
const std::vector<std::string> kWeightTypes = {"f32", "bf16", "f16", "q8_0", "q4_0", "q4_1"};

CLI::Option* add_inference_dtype_option(CLI::App* cmd, std::string& dtype) {
  return cmd
      ->add_option("--dtype,--weights", dtype,
                   "Weights used for inference: f32 (exact), bf16 or f16 (half the memory and "
                   "bytes per token, float32 accumulation; norms and states stay float32), "
                   "q8_0, q4_1 or q4_0 (blocks of 32 quantised at load: 8.5, 5 and 4.5 bits per "
                   "weight). A file written by `retnet quantize` is used in its own type")
      ->check(CLI::IsMember(kWeightTypes))
      ->capture_default_str();
}

CLI::Option* add_bench_dtypes_option(CLI::App* cmd, std::vector<std::string>& dtypes,
                                     const std::string& help) {
  return cmd->add_option("--dtype,--weights", dtypes, help)
      ->delimiter(',')
      ->check(CLI::IsMember(kWeightTypes))
      ->capture_default_str();
}

void prepare_for_inference(Model& model, const std::string& dtype, bool only_if_half) {
  const DecodePrecision p = parse_decode_precision(dtype, "--dtype");
  // f32 with only_if_half: the float32 weights as they are, unless the file was quantised.
  if (only_if_half && p == DecodePrecision::F32 && model.weights_complete()) return;
  prepare_loaded_for_inference(model, p, "--dtype");
}

Model load_for_inference(const std::string& path, const std::string& config_json,
                         const std::string& dtype, bool only_if_half, bool in_place) {
  const DecodePrecision p = parse_decode_precision(dtype, "--dtype");
  if (only_if_half && p == DecodePrecision::F32)
    return load_model(path, optional_config(config_json));
  return load_model_for_inference(path, optional_config(config_json), p, nullptr, in_place);
}

CLI::Option* add_directory_options(CLI::App* cmd, std::string& format, std::string& dtype,
                                   const std::string& format_help) {
  cmd->add_option("--dtype", dtype, "Stored weights of the directory: f32 (exact) or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  return cmd->add_option("--format", format, format_help)
      ->check(CLI::IsMember({"fla", "syncdoth"}));
}

void add_sequence_options(CLI::App* cmd, SequenceCommandOptions& o, const std::string& form_flag,
                          const std::vector<std::string>& forms, const std::string& tokens_help,
                          const std::string& out_help) {
  add_model_options(cmd, o.model, o.config);
  cmd->add_option("--tokens", o.tokens, tokens_help)->required();
  add_checked(cmd, form_flag, o.form,
              "Form; each mixer has parallel and recurrent, chunkwise all but aft, "
              "scan retention only",
              CLI::IsMember(forms));
  cmd->add_option("--chunk", o.chunk, "Chunk size of the chunkwise form (default: the config's)")
      ->check(integer_at_least(0));
  cmd->add_option("--out,-o", o.out, out_help)->required();
  add_threads_option(cmd, o.threads);
}

void add_bench_run_options(CLI::App* cmd, int& reps, int& threads, std::string& json) {
  add_checked(cmd, "--reps", reps, "Repetitions per figure (median reported)",
              integer_at_least(1));
  add_threads_option(cmd, threads);
  cmd->add_option("--json", json, "Also write the results to this JSON file");
}

std::optional<Config> optional_config(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return Config::from_file(path);
}

namespace {

// The value, parsed whole as a number, must satisfy `ok`; else "must be <expected>, got <value>".
CLI::Validator numeric(const std::string& expected, std::function<bool(double)> ok) {
  return CLI::Validator(
      [expected, ok](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end && *end == '\0';
        if (parsed && std::isfinite(v) && ok(v)) return "";
        return fmt::format("must be {}, got {}", expected, text);
      },
      expected);
}

}  // namespace

CLI::Validator number_at_least(double min) {
  return numeric(fmt::format("a finite number >= {}", min), [min](double v) { return v >= min; });
}

CLI::Validator number_above(double min) {
  return numeric(fmt::format("a finite number > {}", min), [min](double v) { return v > min; });
}

CLI::Validator number_within(double lo, double hi) {
  return numeric(fmt::format("a finite number in [{}, {}]", lo, hi),
                 [lo, hi](double v) { return v >= lo && v <= hi; });
}

IntegerRange integer_at_least(int64_t min) { return {min, UINT64_MAX}; }

IntegerRange integer_within(int64_t lo, int64_t hi) {
  return {lo, static_cast<uint64_t>(std::max<int64_t>(hi, 0))};
}

IntegerRange::operator CLI::Validator() const {
  return integer_validator(lo, std::min<uint64_t>(hi, INT64_MAX));
}

CLI::Validator integer_validator(int64_t lo, uint64_t hi) {
  const std::string expected = fmt::format("an integer in [{}, {}]", lo, hi);
  return CLI::Validator(
      [expected, lo, hi](std::string& text) -> std::string {
        // Sign and magnitude, each parsed exactly: a double would round 2^64 - 1 and wrap past it.
        const bool negative = !text.empty() && text[0] == '-';
        const size_t start = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
        uint64_t magnitude = 0;
        const char* first = text.data() + start;
        const char* last = text.data() + text.size();
        const auto [end, ec] = std::from_chars(first, last, magnitude);
        bool ok = first != last && ec == std::errc() && end == last;
        if (ok && negative)
          ok = (lo < 0 && magnitude <= static_cast<uint64_t>(-(lo + 1)) + 1) ||
               (magnitude == 0 && lo <= 0);
        else if (ok)
          ok = magnitude <= hi && (lo <= 0 || magnitude >= static_cast<uint64_t>(lo));
        if (ok) return "";
        return fmt::format("must be {}, got {}", expected, text);
      },
      expected);
}

CLI::Option* add_threads_option(CLI::App* cmd, int& threads, const std::string& help) {
  return cmd->add_option("--threads,-t", threads, help)->check(integer_within(0, 4096));
}

void check_output_not_input(const std::string& output, const std::string& output_what,
                            const std::vector<std::pair<std::string, std::string>>& inputs) {
  namespace fs = std::filesystem;
  if (output.empty()) return;
  for (const auto& [input, what] : inputs) {
    if (input.empty()) continue;
    check_not_same_file(output, output_what, input, what);
    std::error_code ec;
    if (!fs::is_directory(input, ec)) continue;
    for (const auto& entry : fs::directory_iterator(input, ec))
      if (entry.is_regular_file(ec))
        check_not_same_file(output, output_what, entry.path().string(),
                            fmt::format("file of the {} '{}'", what, input));
  }
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace retnet::cli
