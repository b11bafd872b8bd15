// Bad input as a new user meets it: each must end in one clear error naming the input (option,
// file, key, layer) and a non-zero exit; never a crash, a hang, garbage output or a half-written
// file. CLI cases run the real binary with a time limit.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/hash.h"
#include "retnet/core/read_file.h"
#include "retnet/infer/sampler.h"
#include "retnet/model/config.h"
#include "retnet/model/model_io.h"
#include "retnet/train/checkpoint.h"
#include "retnet/train/trainer.h"
#include "tokenizer_fixture.h"

using namespace retnet;
using retnet::test::fails_cleanly;
namespace fs = std::filesystem;

namespace {

// Every CLI case here finishes in seconds; a hang is killed and fails the test.
test::CliResult run(const std::string& args) { return test::run_retnet(args, 120); }

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir =
        fs::temp_directory_path() / ("retnet_bad_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    data = path("data.txt");
    std::ofstream(data, std::ios::binary) << test::corpus_prefix(50000);
    config = path("config.json");
    std::ofstream(config) << R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
      "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 64, "decoder_layers": 2})";
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  std::string train_args(const std::string& out, const std::string& extra = "") const {
    return "train --data " + data + " --config " + config + " --out " + out +
           " --batch 2 --seq 32 --warmup 1 --eval-interval 1000 --eval-tokens 256 " + extra;
  }
  // A tiny model whose tensor `name` is multiplied by `factor` (finite weights).
  std::string scaled_model(const std::string& name, float factor, int64_t row = -1) const {
    Model model = Model::init(Config::from_file(config), 1);
    const ParamEntry* e = model.params().layout().find(name);
    EXPECT_NE(e, nullptr) << name;
    float* w = model.params().data() + e->offset;
    const int64_t cols = e->shape.back();
    for (size_t i = 0; i < e->numel; ++i)
      if (row < 0 || static_cast<int64_t>(i) / cols == row) w[i] *= factor;
    const std::string out = path("scaled.safetensors");
    save_model(model, out);
    return out;
  }
  fs::path dir;
  std::string data, config;
};

// Each (arguments, expected part of the message) fails cleanly.
void expect_each_fails(const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [args, expected] : cases)
    EXPECT_TRUE(fails_cleanly(run(args), expected)) << args;
}

std::vector<nlohmann::json> metric_lines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(fs::path(out) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));  // throws if torn
  return lines;
}

std::vector<int64_t> train_steps(const std::string& out) {
  std::vector<int64_t> steps;
  for (const auto& j : metric_lines(out))
    if (j.contains("loss")) steps.push_back(j["step"].get<int64_t>());
  return steps;
}

// Runs `script` with sh; its exit status.
int sh(const fs::path& script) {
  const int status = std::system(
      ("timeout -s KILL " + std::to_string(test::hang_guard_seconds(120)) + " sh " + script.string())
          .c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

// Sequence parallel runs the chunkwise form: asking for the parallel one is an error, not ignored.
TEST_F(BadInput, SequenceParallelRefusesTheParallelForm) {
  EXPECT_TRUE(fails_cleanly(run(train_args(path("run"), "--steps 1 --seq-parallel --form parallel")),
                            "--seq-parallel trains in the chunkwise form"));
}

// 1. Zero intervals divided by zero (SIGFPE); the library refuses them too.
TEST_F(BadInput, ZeroIntervalsAreRefused) {
  for (const char* option : {"--log-interval", "--eval-interval", "--checkpoint-interval"}) {
    auto r = run(train_args(path("run"), std::string(option) + " 0 --steps 2"));
    EXPECT_TRUE(fails_cleanly(r, std::string(option) + ": must be an integer in [1, "));
  }
  TrainOptions o;
  o.data = data;
  o.out_dir = path("lib");
  o.steps = 2;
  o.log_interval = 0;
  EXPECT_THROW(train(o), Error);
}

// A gradient bucket size that is not a number, negative or too large to count in floats.
TEST_F(BadInput, BadBucketSizesAreRefused) {
  EXPECT_TRUE(fails_cleanly(run(train_args(path("run"), "--steps 1 --bucket-mib -1")),
                            "--bucket-mib"));
  for (double mib : {std::nan(""), -1.0, 1e30}) {
    TrainOptions o;
    o.data = data;
    o.out_dir = path("lib");
    o.steps = 1;
    o.bucket_mib = mib;
    try {
      train(o);
      ADD_FAILURE() << "bucket_mib " << mib << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--bucket-mib"), std::string::npos) << e.what();
    }
  }
}

// 2. A stop signal is honoured between micro-batches: a huge step does not hold it off, and the
// step cut short is not applied.
TEST_F(BadInput, SignalStopsAHugeStepBetweenMicroBatches) {
  const std::string out = path("run");
  const fs::path script = dir / "stop.sh";
  std::ofstream(script) << RETNET_CLI << " " << train_args(out, "--steps 3 --grad-accum 100000000")
                        << " >/dev/null 2>" << path("err.txt") << " &\npid=$!\ni=0\n"
                        << "while [ $i -lt 3000 ] && [ ! -e " << out << "/metrics.jsonl ]; do\n"
                        << "  sleep 0.01; i=$((i + 1))\ndone\nsleep 0.5\nkill -TERM $pid\n"
                        << "wait $pid\n";
  ASSERT_EQ(sh(script), 0) << read_file(path("err.txt"));
  EXPECT_NE(read_file(path("err.txt")).find("stopped by signal 15 at step 0"), std::string::npos)
      << read_file(path("err.txt"));
  EXPECT_TRUE(train_steps(out).empty());
  // The checkpoint is of step 0: the initial weights, untouched by the partial step.
  Model model = Model::init(Config::from_file(config), 7), init = Model::init(model.config(), 1);
  AdamW opt(model.params().layout(), AdamWOptions{});
  auto info = load_latest_checkpoint(out, model, opt);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->step, 0);
  EXPECT_EQ(std::memcmp(model.params().data(), init.params().data(), model.params().size() * 4), 0);
}

// 3. Weights that overflow float32 in the forward pass: an error naming where, in every command.
TEST_F(BadInput, ResidualOverflowIsAnErrorInEveryCommand) {
  // Layer 0's FFN norm weight x 1e19: finite weights, a residual whose square overflows, which
  // the next RMSNorm silently turned into zeros (eval printed ln 256 for any text).
  const std::string model = scaled_model("layers.0.final_layer_norm.weight", 1e19f);
  const std::string where = "in the residual stream of layer 0 at position 0 of sequence 0";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"eval -m " + model + " --data " + data + " --json", where},
      {"logits -m " + model + " --tokens 1,2,3 -o " + path("l.npy"), where},
      {"grad -m " + model + " --tokens 1,2,3 -o " + path("g.safetensors"), where},
      {"generate -m " + model + " -p hello -n 4 --temp 0", where},
      {"generate -m " + model + " --prompts-file " + data + " -n 1", where},
  };
  expect_each_fails(cases);
  EXPECT_FALSE(fs::exists(path("l.npy")));
  EXPECT_FALSE(fs::exists(path("g.safetensors")));
}

TEST_F(BadInput, InfiniteLogitsAreAnErrorInEveryCommand) {
  // The LM head's row of token 5 x 1e38 (with a final norm of 1e30 below, its logit is inf).
  Model m = Model::init(Config::from_file(config), 1);
  for (const char* name : {"layer_norm.weight", "output_projection.weight"}) {
    const ParamEntry* e = m.params().layout().find(name);
    float* w = m.params().data() + e->offset;
    const size_t n = std::string(name) == "layer_norm.weight" ? e->numel : 32;  // row 0
    for (size_t i = 0; i < n; ++i) w[i] = std::copysign(1e30f, w[i]);
  }
  const std::string model = path("inf.safetensors");
  save_model(m, model);
  const std::string where = "non-finite value in the logits at position";
  for (const std::string& args :
       {"eval -m " + model + " --data " + data,
        "logits -m " + model + " --tokens 1,2 -o " + path("l.npy"),
        "logits -m " + model + " --tokens 1,2 --mode recurrent -o " + path("l.npy"),
        "grad -m " + model + " --tokens 1,2,3 -o " + path("g.safetensors"),
        "generate -m " + model + " -p hello -n 4 --temp 0"})
    EXPECT_TRUE(fails_cleanly(run(args), where)) << args;
  EXPECT_FALSE(fs::exists(path("l.npy")));
}

TEST_F(BadInput, DivergingTrainingNamesTheStepAndTheMissingCheckpoint) {
  auto r = run(train_args(path("run"), "--steps 5 --lr 1e30 --clip 0"));
  EXPECT_TRUE(fails_cleanly(r, ": stopping; no checkpoint was written to '" + path("run") + "'"));
  EXPECT_NE(r.err.find("of layer"), std::string::npos) << r.err;
}

TEST_F(BadInput, SamplerGivesAnInfiniteLogitCertaintyAndRefusesNaN) {
  const int64_t V = 100;
  std::vector<float> logits(V);
  for (int64_t i = 0; i < V; ++i) logits[i] = std::sin(static_cast<float>(i));
  logits[57] = std::numeric_limits<float>::infinity();
  SamplerScratch scratch(V);
  SamplingParams p;
  for (uint64_t pos = 0; pos < 200; ++pos)
    ASSERT_EQ(sample_token(logits.data(), V, p, 0, pos, nullptr, 0, scratch), 57) << pos;
  p.temperature = 0;
  EXPECT_EQ(sample_token(logits.data(), V, p, 0, 0, nullptr, 0, scratch), 57);
  logits[3] = std::nanf("");
  EXPECT_THROW(sample_token(logits.data(), V, p, 0, 0, nullptr, 0, scratch), Error);
}

TEST_F(BadInput, LayernormEpsMustBeUsableAsFloat32) {
  for (const char* eps : {"1e300", "1", "-1e-6"}) {
    try {
      Config::from_json(std::string(R"({"layernorm_eps": )") + eps + "}", "c.json");
      ADD_FAILURE() << eps << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layernorm_eps"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(Config::from_json(R"({"layernorm_eps": 1e-5})", "c.json"));
}

// 4. One run per directory; an earlier run is never silently destroyed; metrics stay whole.
TEST_F(BadInput, ASecondRunOnALockedDirectoryFailsAtOnce) {
  const std::string out = path("run");
  fs::create_directories(out);
  const int fd = ::open((fs::path(out) / ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // as a running `retnet train` holds it
  EXPECT_TRUE(fails_cleanly(run(train_args(out, "--steps 2")), "'" + out + "' is in use"));
  ::close(fd);
  EXPECT_EQ(run(train_args(out, "--steps 2")).exit_code, 0);
}

TEST_F(BadInput, AFreshRunRefusesAnEarlierRunsDirectoryUnlessOverwrite) {
  const std::string out = path("run");
  ASSERT_EQ(run(train_args(out, "--steps 4 --checkpoint-interval 2")).exit_code, 0);
  const auto before = list_checkpoint_files(out);
  EXPECT_TRUE(
      fails_cleanly(run(train_args(out, "--steps 2")), "'" + out + "' holds an earlier run"));
  EXPECT_EQ(list_checkpoint_files(out), before);
  EXPECT_TRUE(fails_cleanly(run(train_args(out, "--steps 2 --resume --overwrite")), "--overwrite"));
  auto r = run(train_args(out, "--steps 2 --overwrite"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto after = list_checkpoint_files(out);
  ASSERT_EQ(after.size(), 1u);  // step 2 only: nothing of the earlier run's steps 4 and 2 left
  EXPECT_EQ(train_steps(out), (std::vector<int64_t>{1, 2}));
}

TEST_F(BadInput, ResumeCutsMetricsBackToTheCheckpointAndDropsATornLine) {
  const std::string straight = path("straight"), out = path("run");
  ASSERT_EQ(run(train_args(straight, "--steps 6")).exit_code, 0);
  ASSERT_EQ(run(train_args(out, "--steps 6 --checkpoint-interval 3")).exit_code, 0);
  // What kill -9 between steps 5 and 6 leaves: the checkpoint of step 3, lines up to step 5 and a
  // torn one.
  fs::remove(fs::path(out) / "checkpoint-00000006.safetensors");
  fs::remove(fs::path(out) / "model.safetensors");
  std::string log;
  for (const auto& j : metric_lines(out))
    if (j["step"].get<int64_t>() <= 5) log += j.dump() + "\n";
  std::ofstream(out + "/metrics.jsonl", std::ios::binary) << log << "{\"grad_norm\":0.5,\"lo";
  auto r = run(train_args(out, "--steps 6 --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(train_steps(out), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  auto losses = [](const std::string& run_dir) {
    std::vector<double> v;
    for (const auto& j : metric_lines(run_dir))
      if (j.contains("loss")) v.push_back(j["loss"].get<double>());
    return v;
  };
  EXPECT_EQ(losses(out), losses(straight));
}

TEST_F(BadInput, KillNineThenResumeLeavesWholeGapFreeMetrics) {
  const std::string out = path("run");
  const fs::path script = dir / "kill.sh";
  std::ofstream(script) << RETNET_CLI << " "
                        << train_args(out, "--steps 100000 --checkpoint-interval 7")
                        << " >/dev/null 2>&1 &\npid=$!\ni=0\n"
                        << "while [ $i -lt 3000 ] && [ \"$(cat " << out
                        << "/metrics.jsonl 2>/dev/null | grep -c loss)\" -lt 20 ]; do\n"
                        << "  sleep 0.01; i=$((i + 1))\ndone\nkill -KILL $pid\nwait $pid\nexit 0\n";
  ASSERT_EQ(sh(script), 0);
  // A step of this model takes milliseconds, so on a loaded machine the trainer may be many steps
  // past the 20th (and past a later checkpoint) when the kill lands: resume to 10 steps after the
  // last one it logged (the last line may be torn).
  int64_t last = 0;
  std::ifstream log(fs::path(out) / "metrics.jsonl");
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.contains("loss")) last = std::max(last, j["step"].get<int64_t>());
  }
  const int64_t steps = std::max<int64_t>(30, last + 10);
  auto r = run(train_args(out, "--steps " + std::to_string(steps) +
                                   " --checkpoint-interval 7 --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<int64_t> expected(steps);
  for (int64_t i = 0; i < steps; ++i) expected[i] = i + 1;
  EXPECT_EQ(train_steps(out), expected);
}

// 5. SentencePiece reads UTF-8 only: invalid bytes are refused, not turned into U+FFFD.
TEST_F(BadInput, InvalidUtf8IsRefusedOnTheSentencePiecePath) {
  const std::string tok = test::test_tokenizer_path();
  const std::string bad = path("bad.txt");
  std::ofstream(bad, std::ios::binary)
      << test::corpus_prefix(30000) << "\xff\xfe" << test::corpus_prefix(30000);
  const std::string where = "'" + bad + "' is not valid UTF-8 (bad byte 0xff at offset 30000)";
  EXPECT_TRUE(fails_cleanly(run("tokenizer encode --tokenizer " + tok + " --file " + bad), where));
  EXPECT_TRUE(fails_cleanly(
      run("tokenizer train --data " + bad + " --vocab 400 --out " + path("t.model")), where));
  EXPECT_FALSE(fs::exists(path("t.model")));
  EXPECT_TRUE(fails_cleanly(run("train --data " + bad + " --tokenizer " + tok + " --config " +
                                config + " --steps 1 " + "--out " + path("run")),
                            where));
  // The byte tokenizer takes any bytes, as before.
  EXPECT_EQ(run("tokenizer encode --file " + bad).exit_code, 0);
}

// 6. Every numeric option: range and finiteness, with the option named.
TEST_F(BadInput, NumericOptionsAreValidated) {
  const std::string model = path("m.safetensors");
  save_model(Model::init(Config::from_file(config), 1), model);
  const std::string t = train_args(path("run"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {t + "--steps 2 --lr -1", "--lr: must be a finite number > 0, got -1"},
      {t + "--steps 2 --lr nan", "--lr: must be a finite number > 0, got nan"},
      {t + "--steps 2 --weight-decay nan", "--weight-decay: must be a finite number >= 0"},
      {t + "--steps 0", "--steps: must be an integer in [1, 9223372036854775807], got 0"},
      {t + "--steps -1", "--steps: must be an integer in [1, 9223372036854775807], got -1"},
      {t + "--time-budget -1", "--time-budget: must be a finite number > 0, got -1"},
      {t + "--time-budget nan", "--time-budget: must be a finite number > 0, got nan"},
      {t + "--steps 2 --clip inf", "--clip: must be a finite number >= 0"},
      {t + "--steps 2 --grad-accum 0", "--grad-accum: must be an integer in [1, "},
      {t + "--steps 2 --keep 0", "--keep: must be an integer in [1, "},
      {t + "--steps 2 --seed -1", "--seed: must be an integer in [0, 18446744073709551615]"},
      {t + "--steps 2 -t -3", "--threads: must be an integer in [0, 4096]"},
      {"eval -m " + model + " --data " + data + " --tail nan", "--tail: must be a finite number"},
      {"eval -m " + model + " --data " + data + " --seq 0", "--seq: must be an integer in [1, "},
      {"generate -m " + model + " -p a --temp nan", "--temperature: must be a finite number >= 0"},
      {"generate -m " + model + " -p a --top-p 2", "--top-p: must be a finite number in [0, 1]"},
      {"generate -m " + model + " -p a --repeat-penalty -1", "--repeat-penalty: must be"},
      {"generate -m " + model + " -p a --seed -2", "--seed: must be an integer in [-1, 18446744073709551615]"},
      {"logits -m " + model + " --tokens 1 -o x.npy --chunk -1", "--chunk: must be an integer"},
      {"grad -m " + model + " --tokens 1,2 -o x.st --chunk -1", "--chunk: must be an integer"},
      {"init -o x.st --seed -1", "--seed: must be an integer in [0, 18446744073709551615]"},
      {"demo --tokens 0", "--tokens: must be an integer in [1, 1048576]"},
      {"tokenizer train --data " + data + " --vocab 400 -o x.model --character-coverage nan",
       "--character-coverage: must be a finite number in [0, 1]"},
      {"bench decode --reps 0", "--reps: must be an integer in [1, "},
      {"bench family --train-minutes nan", "--train-minutes: must be a finite number >= 0"},
      {"bench paper --train-cap -1", "--train-cap: must be a finite number >= 0"},
  };
  expect_each_fails(cases);
  EXPECT_FALSE(fs::exists(path("run")));
}

// 7. Unreadable files are named with the reason; forged state files do not wrap the size check.
TEST_F(BadInput, DirectoriesAndMissingFilesAreNamed) {
  const std::string model = path("m.safetensors"), d = path("adir");
  save_model(Model::init(Config::from_file(config), 1), model);
  fs::create_directories(d);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"init --config " + d + " -o " + path("x.st"), "config file '" + d + "' is a directory"},
      {"generate -m " + model + " -f " + d, "prompt file '" + d + "' is a directory"},
      {"generate -m " + model + " --prompts-file " + d, "prompts file '" + d + "' is a directory"},
      {"generate -m " + model + " --state-in " + d, "state file '" + d + "' is a directory"},
      {"eval -m " + model + " --data " + d, "'" + d + "' is a directory"},
      {"tokenizer encode --file " + d, "'" + d + "' is a directory"},
      {"generate -m " + model + " -f " + path("nope"),
       "cannot read prompt file '" + path("nope") + "': No such file or directory"},
  };
  expect_each_fails(cases);
}

TEST_F(BadInput, ForgedStateFileCountsDoNotWrapTheSizeCheck) {
  const std::string model = path("m.safetensors"), state = path("s.state");
  save_model(Model::init(Config::from_file(config), 1), model);
  ASSERT_EQ(run("generate -m " + model + " -p hello -n 2 --state-out " + state).exit_code, 0);
  // Rewrite the header with a count whose byte size wraps size_t, and a valid checksum.
  std::string bytes = read_file(state);
  uint32_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 12, 4);
  auto header = nlohmann::json::parse(bytes.substr(16, header_len));
  const uint64_t forged = (uint64_t{1} << 62) + 1;  // x 4 bytes wraps to 4
  header["recent_tokens"] = forged;
  const std::string h = header.dump();
  const uint32_t new_len = static_cast<uint32_t>(h.size());
  std::string out = bytes.substr(0, 12) + std::string(reinterpret_cast<const char*>(&new_len), 4) +
                    h + bytes.substr(16 + header_len, bytes.size() - 16 - header_len - 8);
  const uint64_t sum = fnv1a(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  std::ofstream(state, std::ios::binary | std::ios::trunc) << out;
  EXPECT_TRUE(fails_cleanly(
      run("generate -m " + model + " --state-in " + state + " -n 1"),
      "state file '" + state + "': header field 'recent_tokens' is " + std::to_string(forged)));
}
