// Tokenizers: the byte tokenizer, SentencePiece models (ours, lossless; and a default-trained one
// with a dummy prefix and normalization), serialization into model metadata, training errors,
// base64.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <fstream>

#include "retnet/core/base64.h"
#include "retnet/core/error.h"
#include "retnet/core/read_file.h"
#include "retnet/core/rng.h"
#include "test_helpers.h"
#include "tokenizer_fixture.h"

using namespace retnet;
namespace fs = std::filesystem;

namespace {

std::string concat_token_bytes(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += t.token_bytes(id);
  return s;
}

// Texts a lossless tokenizer must give back exactly.
const std::vector<std::string> kTexts = {
    "",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n",
    "no leading space",
    " leading space, double  spaces and a trailing one ",
    "\n\nblank lines\n\n\n",
    "tabs\tand\r\nCRLF line ends\r\n",
    "multi-byte UTF-8: h\xC3\xA9llo w\xC3\xB6rld, \xE2\x86\x92 "
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
    "\xF0\x9F\x98\x80",
    "digits 0123456789 and symbols ~`@#$%^&*()_+{}|<>",
};

}  // namespace

TEST(ByteTokenizer, IsTheIdentityOnBytes) {
  auto t = make_byte_tokenizer();
  EXPECT_EQ(t->kind(), "bytes");
  EXPECT_EQ(t->vocab_size(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);  // not UTF-8, every byte
  const auto ids = t->encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(t->decode(ids), all);
  EXPECT_EQ(concat_token_bytes(*t, ids), all);
  EXPECT_THROW(t->token_bytes(256), Error);
  EXPECT_THROW(t->token_bytes(-1), Error);
  // Its metadata is its kind alone; a file without any is byte-level too.
  const auto meta = tokenizer_metadata(*t);
  EXPECT_EQ(meta, (std::map<std::string, std::string>{{"tokenizer", "bytes"}}));
  EXPECT_EQ(tokenizer_from_metadata(meta, "m")->kind(), "bytes");
  EXPECT_EQ(tokenizer_from_metadata({}, "m")->kind(), "bytes");
}

TEST(SentencePieceTokenizer, RoundTripsExactly) {
  auto t = load_tokenizer(test::test_tokenizer_path());
  EXPECT_EQ(t->kind(), "sentencepiece");
  EXPECT_EQ(t->vocab_size(), 400);
  for (const std::string& text : kTexts) {
    const auto ids = t->encode(text);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 400) << id;
    EXPECT_EQ(t->decode(ids), text);
    // Our models add no dummy-prefix space: the per-token bytes are the text, for any text.
    EXPECT_EQ(concat_token_bytes(*t, ids), text);
  }
  // It compresses: about 1.5 bytes per token on held-out Shakespeare.
  const std::string held_out =
      read_file(std::string(RETNET_TEST_DATA) + "/../../data/tinyshakespeare.txt")
          .substr(500000, 100000);
  const auto ids = t->encode(held_out);
  EXPECT_LT(static_cast<double>(ids.size()), held_out.size() / 1.3);
  EXPECT_EQ(t->decode(ids), held_out);
}

TEST(SentencePieceTokenizer, TokenBytesMapSpacesAndBytePieces) {
  auto t = load_tokenizer(test::test_tokenizer_path());
  // An unseen character falls back to its UTF-8 bytes, one token each.
  const auto ids = t->encode("\xE6\x97\xA5");  // U+65E5
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(t->token_bytes(ids[0]), "\xE6");
  EXPECT_EQ(t->token_bytes(ids[2]), "\xA5");
  // "▁the" stands for " the"; control pieces for nothing.
  const auto the = t->encode(" the");
  EXPECT_EQ(concat_token_bytes(*t, the), " the");
  EXPECT_EQ(t->token_bytes(1), "");  // <s>
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->token_bytes(t->eos_id()), "");
  EXPECT_THROW(t->token_bytes(400), Error);
  EXPECT_THROW(t->decode({5, 400}), Error);
}

TEST(SentencePieceTokenizer, LongTextsEncodeAsTheirLines) {
  // Our models' texts are encoded line by line (in parallel blocks of lines): the result must be
  // SentencePiece's own encoding of each line, whatever the text's length or the thread count.
  const std::string path = test::test_tokenizer_path();
  auto t = load_tokenizer(path);
  const std::string text =
      read_file(std::string(RETNET_TEST_DATA) + "/../../data/tinyshakespeare.txt");
  sentencepiece::SentencePieceProcessor reference;
  ASSERT_TRUE(reference.Load(path).ok());
  std::vector<int32_t> expect;
  std::vector<int> line_ids;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size() - 1) + 1;
    ASSERT_TRUE(reference.Encode(text.substr(begin, end - begin), &line_ids).ok());
    expect.insert(expect.end(), line_ids.begin(), line_ids.end());
    begin = end;
  }
  const auto ids = t->encode(text);
  ASSERT_EQ(ids.size(), expect.size());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], expect[i]) << "token " << i;
  // A part of the text encodes as the same tokens as inside the whole.
  const size_t cut = text.find('\n', 700000) + 1;
  const auto tail = t->encode(std::string_view(text).substr(cut));
  EXPECT_TRUE(std::equal(tail.rbegin(), tail.rend(), ids.rbegin()));
}

TEST(SentencePieceTokenizer, SerializedFormGivesTheSameTokenizer) {
  const std::string path = test::test_tokenizer_path();
  auto t = load_tokenizer(path);
  EXPECT_EQ(t->serialize(), read_file(path));
  auto again = tokenizer_from_serialized(t->kind(), t->serialize());
  auto via_meta = tokenizer_from_metadata(tokenizer_metadata(*t), "m");
  EXPECT_EQ(tokenizer_fingerprint(*again), tokenizer_fingerprint(*t));
  EXPECT_EQ(tokenizer_fingerprint(*via_meta), tokenizer_fingerprint(*t));
  EXPECT_NE(tokenizer_fingerprint(*t), tokenizer_fingerprint(*make_byte_tokenizer()));
  for (const std::string& text : kTexts) {
    EXPECT_EQ(again->encode(text), t->encode(text));
    EXPECT_EQ(via_meta->encode(text), t->encode(text));
  }
}

TEST(SentencePieceTokenizer, DefaultTrainedModelsWithADummyPrefixLoad) {
  // SentencePiece's defaults: NFKC normalization, extra whitespace removed, a dummy-prefix space.
  const fs::path dir =
      fs::temp_directory_path() / ("retnet_tok_default_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "text.txt", std::ios::binary) << test::corpus_prefix(100000);
  std::string proto;
  ASSERT_TRUE(sentencepiece::SentencePieceTrainer::Train({{"input", (dir / "text.txt").string()},
                                                          {"model_prefix", ""},
                                                          {"vocab_size", "300"},
                                                          {"minloglevel", "2"}},
                                                         nullptr, &proto)
                  .ok());
  fs::remove_all(dir);
  auto t = make_sentencepiece_tokenizer(proto, "default.model");
  const std::string text = "Before we proceed any further, hear me speak.";
  const auto ids = t->encode(text);
  EXPECT_EQ(t->decode(ids), text);                     // the dummy space is dropped
  EXPECT_EQ(concat_token_bytes(*t, ids), " " + text);  // the stream shows it
  // A long text is encoded whole (blocks would each get a dummy space): SentencePiece's encoding.
  std::string long_text;
  while (long_text.size() < 600000) long_text += text + " ";
  sentencepiece::SentencePieceProcessor reference;
  ASSERT_TRUE(reference.LoadFromSerializedProto(proto).ok());
  std::vector<int> expect;
  ASSERT_TRUE(reference.Encode(long_text, &expect).ok());
  EXPECT_EQ(t->encode(long_text), std::vector<int32_t>(expect.begin(), expect.end()));
  // An unknown character reads as SentencePiece's " ⁇ ".
  const auto unk = t->encode("\xE6\x97\xA5");
  EXPECT_NE(concat_token_bytes(*t, unk).find("\xE2\x81\x87"), std::string::npos);
}

TEST(SentencePieceTokenizer, BadModelsAreRejectedWithAMessage) {
  const std::string bytes = read_file(test::test_tokenizer_path());
  auto message = [](const std::string& proto) {
    try {
      make_sentencepiece_tokenizer(proto, "x.model");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message("").find("'x.model' is empty"), std::string::npos);
  EXPECT_NE(message(bytes.substr(0, bytes.size() / 2)).find("not a SentencePiece model"),
            std::string::npos);
  std::string random(4096, '\0');
  Philox rng(3);
  for (size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>(rng.block(0, i)[0]);
  EXPECT_NE(message(random).find("not a SentencePiece model"), std::string::npos);
  EXPECT_THROW(load_tokenizer("/nonexistent/tok.model"), Error);
  EXPECT_THROW(tokenizer_from_serialized("wordpiece", ""), Error);
  EXPECT_THROW(tokenizer_from_metadata({{"tokenizer", "sentencepiece"}}, "m"), Error);
  EXPECT_THROW(
      tokenizer_from_metadata({{"tokenizer", "sentencepiece"}, {"tokenizer_model", "@@@@"}}, "m"),
      Error);
}

TEST(SentencePieceTraining, ErrorsNameTheProblem) {
  const fs::path dir = fs::temp_directory_path() / ("retnet_tok_train_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string text = (dir / "text.txt").string(), empty = (dir / "empty.txt").string();
  std::ofstream(text, std::ios::binary) << test::corpus_prefix(20000);
  std::ofstream(empty, std::ios::binary) << "";
  auto message = [](SentencePieceTrainOptions o) {
    try {
      train_sentencepiece(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  SentencePieceTrainOptions o;
  o.data = text;
  o.vocab_size = 280;  // byte fallback needs 256 byte pieces + the characters + 4
  EXPECT_NE(message(o).find("smaller than required_chars"), std::string::npos) << message(o);
  o.vocab_size = 100000;
  EXPECT_NE(message(o).find("too high"), std::string::npos) << message(o);
  o.vocab_size = 400;
  o.model_type = "wordpiece";
  EXPECT_NE(message(o).find("'wordpiece'"), std::string::npos);
  o.model_type = "bpe";
  o.data = empty;
  EXPECT_NE(message(o).find("is empty"), std::string::npos);
  o.data = (dir / "missing.txt").string();
  EXPECT_NE(message(o).find("does not exist"), std::string::npos);
  fs::remove_all(dir);
}

TEST(SentencePieceTraining, BpeModelsAreLosslessToo) {
  auto t = load_tokenizer(test::test_tokenizer_path(400, "bpe"));
  EXPECT_EQ(t->vocab_size(), 400);
  for (const std::string& text : kTexts) {
    const auto ids = t->encode(text);
    EXPECT_EQ(t->decode(ids), text);
    EXPECT_EQ(concat_token_bytes(*t, ids), text);
  }
}

TEST(Base64, RoundTripsAndRejectsBadText) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (size_t n = 0; n <= all.size(); n += 37)
    EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n)), "t"), all.substr(0, n)) << n;
  EXPECT_EQ(base64_decode("Zm9vYg==", "t"), "foob");
  for (const char* bad : {"Zm9", "Zm9v!A==", "Z===", "=m9v", "Zm=v"})
    EXPECT_THROW(base64_decode(bad, "t"), Error) << bad;
}
