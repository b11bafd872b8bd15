// Files that cannot hang, lose data or mislead: special files refused by name, outputs that would
// overwrite an input refused, integers read exactly, file-system failures named, and the
// byte-buffer entry points of the loaders.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "retnet/core/error.h"
#include "retnet/core/file_checks.h"
#include "retnet/core/half.h"
#include "retnet/core/hash.h"
#include "retnet/core/mapped_file.h"
#include "retnet/core/read_file.h"
#include "retnet/core/safetensors.h"
#include "retnet/infer/state_file.h"
#include "retnet/model/config.h"
#include "retnet/model/hf_directory.h"
#include "retnet/model/model_io.h"
#include "retnet/model/quant_io.h"
#include "retnet/train/checkpoint.h"
#include "retnet/train/optimizer.h"

using namespace retnet;
using retnet::test::fails_cleanly;
namespace fs = std::filesystem;

namespace {

// A hang (a FIFO that blocks open) is killed here and fails the test.
test::CliResult run(const std::string& args) { return test::run_retnet(args, 300); }

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class FileSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() /
          ("retnet_files_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    config = path("config.json");
    std::ofstream(config) << R"({"decoder_embed_dim": 32, "decoder_value_embed_dim": 64,
      "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 64, "decoder_layers": 2})";
    model = path("m.safetensors");
    save_model(Model::init(Config::from_file(config), 1), model);
    data = path("data.txt");
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog. ";
    write_bytes(data, text);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  std::string fifo(const std::string& name) const {
    const std::string p = path(name);
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0);
    return p;
  }

  fs::path dir;
  std::string config, model, data;
};

// 1. A FIFO blocks open() for ever and /dev/zero never ends: both are refused by name, before
// they are opened for reading, wherever a path comes from outside.
TEST_F(FileSafety, SpecialFilesAreRefusedByNameNotRead) {
  const std::string f = fifo("f");
  const std::string g = "generate -m " + model + " -n 1 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate -m " + f + " -p a -n 1", "'" + f + "' is a FIFO, not a regular file"},
      {g + "-p a --config-json " + f, "config file '" + f + "' is a FIFO, not a regular file"},
      {g + "--state-in " + f, "state file '" + f + "' is a FIFO, not a regular file"},
      {g + "--state-in /dev/zero",
       "state file '/dev/zero' is a character device, not a regular file"},
      {g + "-f " + f, "prompt file '" + f + "' is a FIFO, not a regular file"},
      {g + "--prompts-file /dev/zero", "prompts file '/dev/zero' is a character device"},
      {"init --config " + f + " -o " + path("x.st"), "config file '" + f + "' is a FIFO"},
      {"eval -m " + model + " --data " + f, "'" + f + "' is a FIFO, not a regular file"},
      {"train --data " + f + " --config " + config + " --out " + path("run") + " --steps 1",
       "'" + f + "' is a FIFO, not a regular file"},
      {"info " + f, "'" + f + "' is a FIFO"},
  };
  for (const auto& [args, expected] : cases)
    EXPECT_TRUE(fails_cleanly(run(args), expected)) << args;
}

TEST_F(FileSafety, LibraryReadersRefuseDevicesSocketsAndDirectories) {
  // A socket bound to a path: a stat()-only check names it, open() would fail unclearly.
  const std::string sock = path("s");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  auto expect_refused = [](auto call, const std::string& expected) {
    try {
      call();
      ADD_FAILURE() << "no error; expected '" << expected << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  expect_refused([&] { read_file(sock, "messages file"); },
                 "messages file '" + sock + "' is a socket, not a regular file");
  expect_refused([] { read_file("/dev/null", "API key file"); },
                 "API key file '/dev/null' is a character device");
  expect_refused([] { map_file_readonly("/dev/zero", "token cache"); },
                 "token cache '/dev/zero' is a character device");
  expect_refused([&] { SafetensorsFile::open(dir.string()); },
                 "model file '" + dir.string() + "' is a directory");
  expect_refused([&] { open_regular_file(path("missing"), "slot file"); },
                 "cannot read slot file '" + path("missing") + "': No such file or directory");
  ::close(fd);
}

// 2. An output that is one of the command's inputs would destroy it: refused, naming both, and
// the input is left as it was (also through a hard link and a path spelled differently).
TEST_F(FileSafety, OutputsThatAreInputsAreRefusedAndTheInputKept) {
  const std::string before = bytes_of(model);
  const std::string link = path("hard.safetensors");
  fs::create_hard_link(model, link);
  const std::string spelled = (dir / "." / "m.safetensors").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate -m " + model + " -p a -n 1 --state-out " + model,
       "--state-out file '" + model + "' is the same file as the model '" + model + "'"},
      {"generate -m " + model + " -p a -n 1 --state-out " + link, "is the same file as the model"},
      {"quantize " + model + " " + spelled + " --type q8_0",
       "output '" + spelled + "' is the same file as the input model '" + model + "'"},
      {"grad -m " + model + " --tokens 1,2,3 -o " + model, "is the same file as the model"},
      {"logits -m " + model + " --tokens 1,2 -o " + link, "is the same file as the model"},
      {"init --config " + config + " -o " + config, "is the same file as the config file"},
      {"export " + model + " --format syncdoth -o " + dir.string(),
       "the output directory '" + dir.string() + "' holds the model"},
  };
  for (const auto& [args, expected] : cases)
    EXPECT_TRUE(fails_cleanly(run(args), expected)) << args;
  EXPECT_EQ(bytes_of(model), before);

  // A model directory: a state written over one of its files is refused too.
  const std::string hf = path("hf");
  ASSERT_EQ(run("export " + model + " --format syncdoth -o " + hf).exit_code, 0);
  EXPECT_TRUE(fails_cleanly(
      run("generate -m " + hf + " -p a -n 1 --state-out " + hf + "/model.safetensors"),
      "is the same file as the file of the model '" + hf + "'"));
  EXPECT_TRUE(fails_cleanly(run("export " + hf + " --format syncdoth -o " + hf),
                            "output directory '" + hf + "' is the same file as the model"));
  // Beside the directory is fine: the export writes none of the directory's files.
  const auto beside = run("export " + hf + " --format syncdoth -o " + path("hf2"));
  EXPECT_EQ(beside.exit_code, 0) << beside.err;

  // Continuing a state and saving it back is the intended use: allowed.
  const std::string state = path("s.state");
  ASSERT_EQ(run("generate -m " + model + " -p hello -n 2 --state-out " + state).exit_code, 0);
  const auto again =
      run("generate -m " + model + " -n 2 --state-in " + state + " --state-out " + state);
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

// An export into a directory holding an earlier sharded model would leave its index and shards,
// which later loads prefer: refused by name, the directory left loadable as it was.
TEST_F(FileSafety, ExportRefusesTheStaleFilesOfAnEarlierModel) {
  const std::string out = path("out");
  fs::create_directories(out);
  write_bytes(out + "/model.safetensors.index.json", R"({"weight_map": {}})");
  write_bytes(out + "/model-00001-of-00002.safetensors", "x");
  write_bytes(out + "/tokenizer.model", "x");  // a byte-level model's export writes tokenizer.json
  EXPECT_TRUE(fails_cleanly(
      run("export " + model + " --format syncdoth -o " + out),
      "'" + out +
          "' holds files of an earlier model that this export would not replace "
          "(model-00001-of-00002.safetensors, model.safetensors.index.json, tokenizer.model)"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/config.json"));
  // The same through the library.
  EXPECT_THROW(save_hf_directory(load_model(model), out, HfFlavour::Syncdoth, "f32", {}, -1, -1),
               Error);
  // A directory holding only an earlier export of the same layout is replaced in place.
  const std::string clean = path("clean");
  ASSERT_EQ(run("export " + model + " --format syncdoth -o " + clean).exit_code, 0);
  const auto r = run("export " + model + " --format syncdoth --dtype bf16 -o " + clean);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// 3. A directory with both a single weights file and a shard index holds two models.
TEST_F(FileSafety, DirectoryWithSingleFileAndShardIndexIsRefused) {
  const std::string hf = path("hf");
  ASSERT_EQ(run("export " + model + " --format syncdoth -o " + hf).exit_code, 0);
  fs::copy_file(hf + "/model.safetensors", hf + "/model-00001-of-00001.safetensors");
  nlohmann::json index;
  const SafetensorsFile single = SafetensorsFile::open(hf + "/model.safetensors");
  for (const auto& t : single.tensors())
    index["weight_map"][t.name] = "model-00001-of-00001.safetensors";
  write_bytes(hf + "/model.safetensors.index.json", index.dump());
  EXPECT_TRUE(fails_cleanly(run("generate -m " + hf + " -p a -n 1"),
                            "'" + hf +
                                "' holds both 'model.safetensors' and "
                                "'model.safetensors.index.json'"));
  EXPECT_THROW(load_model(hf), Error);
}

// A state file header's integers must be integers in range: 1.5 was truncated to 1.
TEST_F(FileSafety, StateFileHeaderCountsMustBeExactIntegers) {
  const std::string state = path("s.state");
  ASSERT_EQ(run("generate -m " + model + " -p hello -n 2 --state-out " + state).exit_code, 0);
  const std::string bytes = bytes_of(state);
  uint32_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 12, 4);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(16, header_len));
  auto forge = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json h = header;
    h[key] = value;
    const std::string text = h.dump();
    const uint32_t len = static_cast<uint32_t>(text.size());
    std::string out = bytes.substr(0, 12) + std::string(reinterpret_cast<const char*>(&len), 4) +
                      text + bytes.substr(16 + header_len, bytes.size() - 16 - header_len - 8);
    const uint64_t sum = fnv1a(out.data(), out.size());
    out.append(reinterpret_cast<const char*>(&sum), 8);
    return out;
  };
  const Model m = load_model(model);
  const int64_t position = header["position"].get<int64_t>();
  const std::vector<std::pair<const char*, nlohmann::json>> cases = {
      {"position", static_cast<double>(position) - 0.5},
      {"position", -1},
      {"logits", 1e30},
      {"recent_tokens", "2"},
      {"text_tail_bytes", nlohmann::json::number_unsigned_t{1} << 63},
  };
  for (const auto& [key, value] : cases) {
    const std::string forged = path("forged.state");
    write_bytes(forged, forge(key, value));
    EXPECT_TRUE(fails_cleanly(run("generate -m " + model + " --state-in " + forged + " -n 1"),
                              std::string("header field '") + key + "' is " + value.dump() +
                                  "; expected an integer in [0, "))
        << key << " = " << value.dump();
    EXPECT_THROW(parse_state_file(forge(key, value), "forged", m, 0), Error);
  }
  // The untouched bytes pass the header checks (and then fail only on the fingerprint given).
  try {
    parse_state_file(bytes, "s", m, 0);
    ADD_FAILURE() << "a wrong fingerprint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("was saved by another model"), std::string::npos)
        << e.what();
  }
}

// Seeds cover the whole uint64 range exactly; beyond it, and numeric options out of their
// type's range, are refused with the option, the value and the range (no wrapped value).
TEST_F(FileSafety, NumericOptionsAreExactOrRefusedWithTheirRange) {
  for (const std::string seed : {"9223372036854775808", "18446744073709551615"}) {
    const auto r = run("generate -m " + model + " -p a -n 2 --json --seed " + seed);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["seed"].get<uint64_t>(), std::stoull(seed));
  }
  const std::string g = "generate -m " + model + " -p a ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {g + "--seed 18446744073709551616",
       "--seed: must be an integer in [-1, 18446744073709551615], got 18446744073709551616"},
      {g + "-n 99999999999999999999",
       "--max-tokens: must be an integer in [0, 9223372036854775807], got 99999999999999999999"},
      {g + "--top-k -99999999999999999999", "--top-k: must be an integer in [0, "},
      {g + "-n 1.5", "--max-tokens: must be an integer in [0, 9223372036854775807], got 1.5"},
      {g + "-t 1e30", "--threads: must be an integer in [0, 4096], got 1e30"},
      {"init -o " + path("x.st") + " --seed 18446744073709551616",
       "--seed: must be an integer in [0, 18446744073709551615]"},
      {"bench decode --reps 4294967296", "--reps: must be an integer in [1, 2147483647]"},
  };
  for (const auto& [args, expected] : cases) {
    const auto r = run(args);
    EXPECT_TRUE(fails_cleanly(r, expected)) << args;
    EXPECT_EQ(r.err.find("-9223372036854775808"), std::string::npos) << r.err;
  }
}

// 4. File-system conditions are the user's to fix: named with the path and the reason, never
// "internal error".
TEST_F(FileSafety, FileSystemFailuresNameThePathAndReason) {
  const std::string loop = path("loop");
  fs::create_symlink(loop, loop);
  const std::string long_name = path(std::string(300, 'a'));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"generate -m " + loop + " -p a", "'" + loop + "': Too many levels of symbolic links"},
      {"generate -m " + long_name + " -p a", "File name too long"},
      {"generate -m " + model + " -n 1 -f " + loop, "Too many levels of symbolic links"},
      {"train --data " + data + " --config " + config + " --out " + loop + "/run --steps 1",
       "Too many levels of symbolic links"},
  };
  for (const auto& [args, expected] : cases) {
    const auto r = run(args);
    EXPECT_TRUE(fails_cleanly(r, expected)) << args;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  }
  // Through the library: a retnet::Error, not a std::filesystem::filesystem_error.
  try {
    list_checkpoint_files(loop + "/run");
    ADD_FAILURE() << "a symbolic-link loop was listed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Too many levels of symbolic links"), std::string::npos);
  }
}

// A NaN in an imported directory's weight is reported under the file's tensor name and file,
// beside the engine's name, whether the tensor is converted or used where it lies.
TEST_F(FileSafety, NonFiniteImportedWeightNamesTheFileAndItsTensor) {
  const std::string hf = path("hf");
  ASSERT_EQ(run("export " + model + " --format syncdoth --dtype bf16 -o " + hf).exit_code, 0);
  const std::string file = hf + "/model.safetensors";
  const std::string tensor = "model.layers.0.retention.q_proj.weight";
  size_t offset = 0;
  {
    const SafetensorsFile f = SafetensorsFile::open(file);
    const SafetensorsTensor* t = f.find(tensor);
    ASSERT_NE(t, nullptr);
    offset = t->data_offset;
  }
  std::string bytes = bytes_of(file);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const uint16_t nan_bits = 0x7fc0;  // a bf16 NaN
  std::memcpy(bytes.data() + 8 + header_len + offset + 6, &nan_bits, 2);
  write_bytes(file, bytes);
  for (const std::string dtype : {"f32", "bf16"}) {
    const auto r = run("generate -m " + hf + " -p hello -n 2 --dtype " + dtype);
    EXPECT_TRUE(fails_cleanly(r, tensor)) << dtype;
    EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("layers.0.retention.q_proj.weight"), std::string::npos) << r.err;
  }
}

// 3. Checkpoints: a file whose name and contents disagree on the step is skipped with a warning
// naming both; temporary files of a killed writer are removed at the next save or resume.
TEST_F(FileSafety, CheckpointStepsAndOrphanedTemporaries) {
  Model m = load_model(model);
  AdamW opt(m.params().layout(), AdamWOptions{});
  const std::string run_dir = path("run");
  CheckpointInfo info;
  info.total_steps = 10;
  info.step = 2;
  save_checkpoint(run_dir, m, opt, info, 5);
  info.step = 4;
  save_checkpoint(run_dir, m, opt, info, 5);
  // The step-4 file renamed as step 9: its name says 9, its contents 4.
  fs::rename(run_dir + "/checkpoint-00000004.safetensors",
             run_dir + "/checkpoint-00000009.safetensors");
  const std::string orphan = run_dir + "/.checkpoint-00000006.safetensors.tmp.12345";
  write_bytes(orphan, "half a checkpoint");
  testing::internal::CaptureStderr();
  const auto loaded = load_latest_checkpoint(run_dir, m, opt);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->step, 2);
  EXPECT_NE(err.find("is named for step 9 but holds step 4"), std::string::npos) << err;
  EXPECT_NE(err.find("not from the newer"), std::string::npos) << err;
  EXPECT_NE(err.find(orphan), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(orphan));

  write_bytes(orphan, "half a checkpoint");
  testing::internal::CaptureStderr();
  info.step = 6;
  save_checkpoint(run_dir, m, opt, info, 5);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(orphan), std::string::npos);
  EXPECT_FALSE(fs::exists(orphan));

  // The byte entry point: a whole checkpoint restores, a damaged one is an Error.
  const std::string bytes = bytes_of(run_dir + "/checkpoint-00000006.safetensors");
  EXPECT_EQ(parse_checkpoint(bytes, "ckpt", m, opt).step, 6);
  std::string damaged = bytes;
  damaged[damaged.size() - 1] ^= 0x40;
  EXPECT_THROW(parse_checkpoint(damaged, "ckpt", m, opt), Error);
  EXPECT_THROW(parse_checkpoint(bytes.substr(0, bytes.size() / 2), "ckpt", m, opt), Error);
}

// The fuzzing entry points over byte buffers: truncations and corruptions are Errors.
TEST_F(FileSafety, ByteEntryPointsRejectTruncatedInput) {
  const std::string bytes = bytes_of(model);
  const SafetensorsFile whole = SafetensorsFile::from_bytes(bytes, "m");
  EXPECT_EQ(whole.tensors().size(), SafetensorsFile::open(model).tensors().size());
  for (size_t cut : {size_t{0}, size_t{7}, size_t{9}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_THROW(SafetensorsFile::from_bytes(bytes.substr(0, cut), "cut"), Error) << cut;

  const std::string q = path("q.safetensors");
  ASSERT_EQ(run("quantize " + model + " " + q + " --type q8_0").exit_code, 0);
  const std::string qbytes = bytes_of(q);
  const Config c = Config::from_file(config);
  LoadInfo li;
  const Model back = load_quantized_file(SafetensorsFile::from_bytes(qbytes, "q"), c, li);
  EXPECT_EQ(back.config().to_json(), c.to_json());
  // A NaN scale in the first block of the first quantised tensor.
  const SafetensorsFile qf = SafetensorsFile::from_bytes(qbytes, "q");
  for (const auto& t : qf.tensors()) {
    if (t.dtype != "U8") continue;
    std::string bad = qbytes;
    uint64_t header_len = 0;
    std::memcpy(&header_len, bad.data(), 8);
    const uint16_t nan_half = 0x7e00;
    std::memcpy(bad.data() + 8 + header_len + t.data_offset, &nan_half, 2);
    EXPECT_THROW(load_quantized_file(SafetensorsFile::from_bytes(bad, "q"), c, li), Error);
    break;
  }
}

}  // namespace
