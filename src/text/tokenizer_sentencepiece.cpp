// SentencePiece tokenizer over Debian's libsentencepiece: any `.model` file (unigram, BPE, ...).
#include <sentencepiece_processor.h>

#include <string_view>

#include "retnet/core/error.h"
#include "retnet/core/parallel.h"
#include "retnet/text/tokenizer.h"
#include "retnet/text/utf8.h"
#include "sentencepiece_status.h"

namespace retnet {
namespace {

// Texts are encoded in blocks of about this size that end at line breaks, in parallel, when that is
// exact (see newline_is_a_boundary_); a unigram lattice over a whole corpus would not fit in
// memory.
constexpr size_t kBlockBytes = 256 << 10;

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& model_proto, const std::string& origin)
      : proto_(model_proto) {
    RETNET_CHECK(!model_proto.empty(), "'{}' is empty; expected a SentencePiece model", origin);
    const auto status = processor_.LoadFromSerializedProto(model_proto);
    RETNET_CHECK(status.ok(), "'{}' is not a SentencePiece model ({} bytes): {}", origin,
                 model_proto.size(), sentencepiece_reason(status));
    RETNET_CHECK(processor_.GetPieceSize() > 0, "'{}' is a SentencePiece model with no pieces",
                 origin);
    surfaces_.resize(processor_.GetPieceSize());
    for (int id = 0; id < processor_.GetPieceSize(); ++id) surfaces_[id] = surface_of(id);
    // A model that adds a dummy-prefix space shows it on a one-letter text.
    const bool adds_dummy_prefix = joined_surfaces(encode_whole("a")) == " a";
    newline_is_a_boundary_ = !adds_dummy_prefix && joined_surfaces(encode_whole("\n")) == "\n" &&
                             encode_whole("\n").size() == 1 &&
                             joined_surfaces(encode_whole(" \n ")) == " \n ";
  }

  std::string kind() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(surfaces_.size()); }
  int32_t eos_id() const override { return processor_.eos_id(); }
  std::string serialize() const override { return proto_; }
  bool reads_utf8_only() const override { return true; }

  std::string token_bytes(int32_t id) const override {
    RETNET_CHECK(id >= 0 && id < vocab_size(),
                 "token id {} is out of range for a SentencePiece "
                 "vocabulary of {}",
                 id, vocab_size());
    return surfaces_[id];
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    require_utf8(text, "a text given to the SentencePiece tokenizer");
    if (!newline_is_a_boundary_) return encode_whole(text);
    // Blocks of about kBlockBytes that end at line breaks, encoded in parallel, line by line.
    std::vector<std::string_view> blocks;
    for (size_t begin = 0; begin < text.size();) {
      size_t end = begin + kBlockBytes;
      if (end >= text.size()) {
        end = text.size();
      } else {
        // The block's last line break; a block with none runs on to the next one.
        size_t nl = text.rfind('\n', end - 1);
        if (nl == std::string_view::npos || nl < begin) nl = text.find('\n', end);
        end = nl == std::string_view::npos ? text.size() : nl + 1;
      }
      blocks.push_back(text.substr(begin, end - begin));
      begin = end;
    }
    std::vector<std::vector<int32_t>> parts(blocks.size());
    std::vector<std::string> errors(blocks.size());
    parallel_for(static_cast<int64_t>(blocks.size()), [&](int64_t i) {
      try {
        parts[i] = encode_lines(blocks[i]);
      } catch (const std::exception& e) {  // no exception may leave an OpenMP region
        errors[i] = e.what();
      }
    });
    size_t total = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (!errors[i].empty()) throw Error(errors[i]);
      total += parts[i].size();
    }
    std::vector<int32_t> ids;
    ids.reserve(total);
    for (const auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
    return ids;
  }

  // The processor's Decode: it drops the dummy-prefix space and handles the model's
  // denormalization, so that decode(encode(text)) == text for a lossless model.
  std::string decode(const std::vector<int32_t>& ids) const override {
    for (int32_t id : ids) (void)token_bytes(id);  // range check with our message
    std::string text;
    const auto status = processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    RETNET_CHECK(status.ok(), "SentencePiece cannot decode {} tokens: {}", ids.size(),
                 sentencepiece_reason(status));
    return text;
  }

 private:
  // What a piece stands for in running text: "▁" (U+2581) is a space, <0xNN> byte pieces are
  // their byte, control pieces (<s>, </s>) nothing, the unknown piece SentencePiece's " ⁇ ".
  std::string surface_of(int id) const {
    if (processor_.IsControl(id)) return "";
    if (processor_.IsUnknown(id)) return " \xE2\x81\x87 ";
    const std::string& piece = processor_.IdToPiece(id);
    if (processor_.IsByte(id) && piece.size() == 6)
      return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    std::string out;
    static constexpr std::string_view kSpace = "\xE2\x96\x81";
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += piece[i++];
      }
    }
    return out;
  }

  std::vector<int32_t> encode_whole(std::string_view text) const {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    RETNET_CHECK(status.ok(), "SentencePiece cannot encode a text of {} bytes: {}", text.size(),
                 sentencepiece_reason(status));
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  // One Encode per line: SentencePiece sums a whole text's piece scores in float, so in a long
  // text near-ties resolve differently than in a short one; line by line, a line's tokens do not
  // depend on the text around it (and it is faster).
  std::vector<int32_t> encode_lines(std::string_view text) const {
    std::vector<int32_t> ids;
    std::vector<int> line_ids;
    for (size_t begin = 0; begin < text.size();) {
      const size_t nl = text.find('\n', begin);
      const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
      const auto status = processor_.Encode(text.substr(begin, end - begin), &line_ids);
      RETNET_CHECK(status.ok(), "SentencePiece cannot encode a line of {} bytes: {}", end - begin,
                   sentencepiece_reason(status));
      ids.insert(ids.end(), line_ids.begin(), line_ids.end());
      begin = end;
    }
    return ids;
  }

  std::string joined_surfaces(const std::vector<int32_t>& ids) const {
    std::string s;
    for (int32_t id : ids) s += surfaces_[id];
    return s;
  }

  std::string proto_;
  sentencepiece::SentencePieceProcessor processor_;
  std::vector<std::string> surfaces_;
  // True when pieces never span a line break, so lines can be encoded one by one: no dummy
  // prefix, the line break a piece of its own, whitespace around it kept as it is (every model
  // `retnet tokenizer train` writes). Other models encode a text in one call.
  bool newline_is_a_boundary_ = false;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& model_proto,
                                                        const std::string& origin) {
  return std::make_unique<SentencePieceTokenizer>(model_proto, origin);
}

}  // namespace retnet
