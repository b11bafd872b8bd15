#include <cstdio>

#include "commands.h"
#include "retnet/retnet.h"

namespace retnet::cli {

void register_init(CLI::App& app) {
  struct Opts {
    std::string config, out;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("init", "Write a randomly initialised model (torchscale's init)");
  cmd->add_option("--config", o->config,
                  "Model config JSON (torchscale RetNetConfig names); default: the small model");
  cmd->add_option("--out,-o", o->out, "Output .safetensors file")->required();
  add_checked(cmd, "--seed,-s", o->seed, "Random seed", integer_at_least(0));
  cmd->callback([o] {
    Config config = o->config.empty() ? Config{} : Config::from_file(o->config);
    Model model = Model::init(config, o->seed);
    save_model(model, o->out);
    std::printf("wrote %s: %lld parameters (%s), seed %llu\n", o->out.c_str(),
                static_cast<long long>(model.parameter_count()),
                human_bytes(4.0 * model.parameter_count()).c_str(),
                static_cast<unsigned long long>(o->seed));
  });
}

}  // namespace retnet::cli
