// The `retnet` binary end to end: --help everywhere, init/info/logits, and bad input giving one
// clear message on stderr and a non-zero exit, never a crash or a signal.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli_runner.h"
#include "retnet/core/npy.h"
#include "test_helpers.h"

namespace fs = std::filesystem;

namespace {

using Result = retnet::test::CliResult;

Result run_cli(const std::string& args) { return retnet::test::run_retnet(args); }

// A failure the way users must see it: non-zero exit, no signal, a "retnet: error:" message.
::testing::AssertionResult clean_failure(const Result& r) { return retnet::test::fails_cleanly(r); }

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = retnet::test::fresh_temp_dir("cli");
    std::ofstream(dir / "c.json") << R"({"decoder_embed_dim": 16, "decoder_value_embed_dim": 24,
      "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 20, "decoder_layers": 2,
      "vocab_size": 30})";
    model = (dir / "m.safetensors").string();
    Result r = run_cli("init --config " + (dir / "c.json").string() + " --out " + model + " -s 5");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
  std::string model;
};

}  // namespace

TEST_F(Cli, EverySubcommandHasHelp) {
  for (const char* sub : {"", "init", "info", "logits", "demo", "grad"}) {
    Result r = run_cli(std::string(sub) + " --help");
    EXPECT_EQ(r.exit_code, 0) << sub;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub << ": " << r.out;
  }
  EXPECT_TRUE(clean_failure(run_cli("")));             // no subcommand
  EXPECT_TRUE(clean_failure(run_cli("frobnicate")));  // unknown subcommand
}

TEST_F(Cli, InfoAndLogitsWork) {
  Result info = run_cli("info " + model + " --json");
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("\"state_bytes_per_sequence\": " + std::to_string(2 * 2 * 8 * 13 * 4)),
            std::string::npos)
      << info.out;
  std::string out = (dir / "l.npy").string();
  std::vector<std::vector<float>> results;
  for (const char* mode : {"parallel", "recurrent", "chunkwise --chunk 3", "scan"}) {
    Result r = run_cli("logits -m " + model + " --tokens 1,2,3,29,0,5,7 --mode " + mode + " -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    retnet::NpyArray a = retnet::read_npy(out);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{7, 30}));
    results.push_back(a.data);
  }
  for (size_t i = 1; i < results.size(); ++i)
    EXPECT_TRUE(retnet::test::close(results[i], results[0], 1e-5)) << i;
}

TEST_F(Cli, BadInputFailsCleanly) {
  std::string out = (dir / "l.npy").string();
  std::string bytes;
  {
    std::ifstream in(model, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string truncated = (dir / "t.safetensors").string();
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  std::ofstream(dir / "bad.json") << R"({"decoder_value_embed_dim": 25, "decoder_retention_heads": 2})";
  std::ofstream(dir / "broken.json") << R"({"decoder_layers": 2,)";
  const std::string logits = "logits -o " + out + " -m ";
  for (const std::string& args : std::vector<std::string>{
           "info " + truncated,
           std::string("info /nonexistent.safetensors"),
           logits + model + " --tokens 1,2,30",          // id out of range
           logits + model + " --tokens 1,-2",            // negative id
           logits + model + " --tokens 1,,2",            // empty item
           logits + model + " --tokens abc",             // not a number
           logits + model + " --tokens 1 --mode fast",  // unknown form
           logits + model + " --tokens 1 --chunk -3",
           logits + truncated + " --tokens 1",
           logits + model + " --config-json " + (dir / "bad.json").string() + " --tokens 1",
           logits + model + " --config-json " + (dir / "broken.json").string() + " --tokens 1",
           "init --config " + (dir / "bad.json").string() + " --out " + (dir / "x.st").string(),
           "init --config " + (dir / "c.json").string() + " --out /nonexistent/dir/x.st",
       }) {
    Result r = run_cli(args);
    EXPECT_TRUE(clean_failure(r)) << args;
    EXPECT_LT(r.err.size(), 2000u) << args << ": " << r.err;
  }
}
