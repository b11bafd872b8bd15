// Model files and configs: round trips, torchscale names, and every kind of bad input giving a
// retnet::Error (never a crash).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "retnet/core/error.h"
#include "retnet/core/npy.h"
#include "retnet/core/safetensors.h"
#include "retnet/model/forward.h"
#include "retnet/model/model_io.h"
#include "test_helpers.h"

using namespace retnet;
namespace fs = std::filesystem;

namespace {

Config tiny() { return test::tiny_config(); }

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("retnet_io_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
}

// Rewrites a safetensors file with its header transformed by `edit` (data kept).
void edit_header(const fs::path& in, const fs::path& out, void (*edit)(nlohmann::json&)) {
  std::string bytes = read_all(in);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  auto h = nlohmann::json::parse(bytes.substr(8, n));
  edit(h);
  std::string hs = h.dump();
  std::string res(8, '\0');
  for (int i = 0; i < 8; ++i) res[i] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
  write_all(out, res + hs + bytes.substr(8 + n));
}

std::vector<float> logits_of(const Model& m) {
  std::vector<int32_t> tok = {1, 5, 29, 0, 7};
  std::vector<float> out(5 * m.config().vocab_size);
  Arena arena;
  forward_logits(m, tok.data(), 1, 5, out.data(), ForwardOptions{}, arena);
  return out;
}

class ModelFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = temp_dir();
    path = (dir / "m.safetensors").string();
    save_model(Model::init(tiny(), 3), path);
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
  std::string path;
};

}  // namespace

TEST_F(ModelFiles, RoundTripIsZeroCopyAndExact) {
  Model original = Model::init(tiny(), 3);
  LoadInfo info;
  Model loaded = load_model(path, std::nullopt, &info);
  EXPECT_TRUE(info.zero_copy);
  EXPECT_FALSE(info.torchscale);
  EXPECT_EQ(loaded.config().to_json(), original.config().to_json());
  EXPECT_EQ(0, std::memcmp(loaded.params().data(), original.params().data(),
                           original.params().size() * 4));
  EXPECT_EQ(logits_of(loaded), logits_of(original));
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "retnet");
  EXPECT_EQ(f.metadata().at("format_version"), "1");
}

TEST_F(ModelFiles, TorchscaleNamesInAnyOrderWithPrefixAndHalfPrecision) {
  // A torchscale-style export: other tensor order, no metadata, "decoder." prefix, bf16 and f16.
  Model m = Model::init(tiny(), 3);
  std::string bytes;
  nlohmann::json header;
  std::vector<std::string> order;
  for (const auto& e : m.params().layout().entries()) order.insert(order.begin(), e.name);
  size_t offset = 0;
  std::string data;
  for (size_t k = 0; k < order.size(); ++k) {
    const auto& e = m.params().layout().at(order[k]);
    const float* w = m.params().tensor(order[k]);
    bool bf16 = k % 2 == 0;
    for (size_t i = 0; i < e.numel; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &w[i], 4);
      // bf16: the original truncated; f16: alternating 0.5 (0x3800) and -2 (0xC000).
      uint16_t h = bf16 ? static_cast<uint16_t>(bits >> 16) : (i % 2 ? 0xC000 : 0x3800);
      data.append(reinterpret_cast<const char*>(&h), 2);
    }
    header["decoder." + order[k]] = {{"dtype", bf16 ? "BF16" : "F16"},
                                     {"shape", e.shape},
                                     {"data_offsets", {offset, offset + 2 * e.numel}}};
    offset += 2 * e.numel;
  }
  std::string hs = header.dump();
  std::string res(8, '\0');
  for (int i = 0; i < 8; ++i) res[i] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
  fs::path p = dir / "ts.safetensors";
  write_all(p, res + hs + data);
  EXPECT_THROW(load_model(p.string()), Error);  // no config in the file: must be given
  LoadInfo info;
  Model loaded = load_model(p.string(), tiny(), &info);
  EXPECT_TRUE(info.torchscale);
  EXPECT_FALSE(info.zero_copy);
  // bf16 tensors equal the truncated originals; f16 values decode exactly.
  for (size_t k = 0; k < order.size(); ++k) {
    const float* a = loaded.params().tensor(order[k]);
    const float* w = m.params().tensor(order[k]);
    for (size_t i = 0; i < m.params().layout().at(order[k]).numel; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &w[i], 4);
      bits &= 0xffff0000u;
      float expect;
      std::memcpy(&expect, &bits, 4);
      ASSERT_EQ(a[i], k % 2 == 0 ? expect : (i % 2 ? -2.f : 0.5f)) << order[k] << "[" << i << "]";
    }
  }
}

TEST_F(ModelFiles, TruncatedFilesAreRejected) {
  std::string bytes = read_all(path);
  for (size_t cut : {size_t{0}, size_t{4}, size_t{8}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    fs::path p = dir / "cut.safetensors";
    write_all(p, bytes.substr(0, cut));
    EXPECT_THROW(load_model(p.string()), Error) << "cut at " << cut;
  }
}

TEST_F(ModelFiles, CorruptHeadersAreRejected) {
  std::string bytes = read_all(path);
  fs::path p = dir / "bad.safetensors";
  std::string junk = bytes;
  for (size_t i = 9; i < 40; ++i) junk[i] = '#';
  write_all(p, junk);
  EXPECT_THROW(load_model(p.string()), Error);
  std::string huge = bytes;
  huge[7] = 0x7f;  // header length ~ 2^62
  write_all(p, huge);
  EXPECT_THROW(load_model(p.string()), Error);
  write_all(p, "not a model at all, just text of some length");
  EXPECT_THROW(load_model(p.string()), Error);
  EXPECT_THROW(load_model((dir / "missing.safetensors").string()), Error);
}

TEST_F(ModelFiles, WrongDtypeShapeOrNamesAreRejected) {
  fs::path p = dir / "edited.safetensors";
  edit_header(path, p, [](nlohmann::json& h) { h["layer_norm.weight"]["dtype"] = "I32"; });
  EXPECT_THROW(load_model(p.string()), Error);
  edit_header(path, p, [](nlohmann::json& h) { h["layer_norm.weight"]["shape"] = {4, 4}; });
  EXPECT_THROW(load_model(p.string()), Error);  // same bytes, wrong shape
  edit_header(path, p, [](nlohmann::json& h) { h["layer_norm.weight"]["shape"] = {17}; });
  EXPECT_THROW(load_model(p.string()), Error);  // byte count disagrees with the shape
  edit_header(path, p, [](nlohmann::json& h) {
    h["layers.9.ffn.fc1.weight"] = h["layer_norm.weight"];
    h.erase("layer_norm.weight");
  });
  EXPECT_THROW(load_model(p.string()), Error);  // unknown and missing names
  edit_header(path, p, [](nlohmann::json& h) { h["layer_norm.weight"]["data_offsets"] = {0, 64}; });
  EXPECT_THROW(load_model(p.string()), Error);  // overlaps another tensor
  // A config that disagrees with the stored shapes.
  Config other = tiny();
  other.ffn_dim = 22;
  EXPECT_THROW(load_model(path, other), Error);
}

TEST_F(ModelFiles, NonFiniteWeightsAreRejected) {
  Model m = Model::init(tiny(), 3);
  m.params().tensor("layers.1.ffn.fc2.weight")[7] = NAN;
  fs::path p = dir / "nan.safetensors";
  save_model(m, p.string());
  try {
    load_model(p.string());
    FAIL() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.1.ffn.fc2.weight"), std::string::npos) << e.what();
  }
}

TEST(Config, TorchscaleNamesAndDefaults) {
  Config c = Config::from_json(R"({"decoder_embed_dim": 64, "decoder_retention_heads": 2,
      "decoder_value_embed_dim": 128, "dropout": 0.1, "activation_fn": "swish",
      "no_scale_embedding": false, "layernorm_eps": 0})");
  EXPECT_EQ(c.embed_dim, 64);
  EXPECT_EQ(c.key_dim(), 32);
  EXPECT_EQ(c.head_value_dim(), 64);
  EXPECT_EQ(c.layers, Config{}.layers);
  EXPECT_EQ(c.activation, Activation::Swish);
  EXPECT_DOUBLE_EQ(c.embed_scale(), 8.0);
  EXPECT_EQ(c.layernorm_eps, 0.0);
  EXPECT_NEAR(c.gamma(0), 1 - 1.0 / 32, 1e-15);
  EXPECT_NEAR(c.gamma(1), 1 - 1.0 / 64, 1e-15);
  EXPECT_EQ(Config::from_json(c.to_json()).to_json(), c.to_json());
  Config paper = Config::from_json(R"({"decoder_retention_heads": 4, "decay": "paper"})");
  EXPECT_NEAR(paper.gamma(0), 1 - 1.0 / 32, 1e-12);
  EXPECT_NEAR(paper.gamma(3), 1 - 1.0 / 512, 1e-12);
}

TEST(Config, MalformedOrInconsistentConfigsAreRejected) {
  for (const char* bad : {
           "{",                                                     // not JSON
           "[1, 2]",                                                // not an object
           R"({"decoder_embed_dim": "big"})",                      // wrong type
           R"({"decoder_value_embed_dim": 100, "decoder_retention_heads": 3})",  // not divisible
           R"({"decoder_embed_dim": 60, "decoder_retention_heads": 4})",  // d_k = 15 is odd
           R"({"decoder_layers": 0})", R"({"vocab_size": -5})", R"({"layernorm_eps": -1})",
           R"({"activation_fn": "relu"})", R"({"decoder_embd_dim": 64})",  // typo: unknown field
           R"({"deepnorm": true})", R"({"decoder_normalize_before": false})",
           R"({"moe_freq": 2})", R"({"decoder_embed_dim": 1e30})"}) {
    EXPECT_THROW(Config::from_json(bad), Error) << bad;
  }
  EXPECT_THROW(Config::from_file("/nonexistent/config.json"), Error);
}

TEST(Npy, RoundTripAndRejectsOtherTypes) {
  fs::path d = temp_dir();
  std::vector<float> x = {1.f, -2.f, 3.5f, 0.f, 7.f, 8.f};
  write_npy((d / "a.npy").string(), x.data(), {2, 3});
  NpyArray a = read_npy((d / "a.npy").string());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, x);
  write_all(d / "b.npy", "\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'}");
  EXPECT_THROW(read_npy((d / "b.npy").string()), Error);
  fs::remove_all(d);
}
