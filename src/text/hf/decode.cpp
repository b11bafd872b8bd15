// Decoders of tokenizer.json: token strings -> text, as HF's decode_chain steps.
#include "components.h"
#include "retnet/text/utf8.h"
#include "utf8_iter.h"

namespace retnet::hf {
namespace {

// "<0xNN>" -> NN, else -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string bytes;
  auto flush = [&] {
    if (!bytes.empty()) out.push_back(utf8_sanitize(bytes));
    bytes.clear();
  };
  for (auto& t : tokens) {
    const int b = byte_token(t);
    if (b >= 0) {
      bytes += static_cast<char>(b);
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

std::string strip(const DecoderStep& s, const std::string& t) {
  size_t begin = 0, end = t.size();
  for (int i = 0; i < s.start && t.compare(begin, s.text.size(), s.text) == 0 && begin < end; ++i)
    begin += s.text.size();
  for (int i = 0; i < s.stop && end >= begin + s.text.size() &&
                  t.compare(end - s.text.size(), s.text.size(), s.text) == 0;
       ++i)
    end -= s.text.size();
  return t.substr(begin, end - begin);
}

// Appends token t with its byte-level characters turned back to bytes (others kept as they are).
void append_byte_level(const std::string& t, std::string& bytes) {
  for (size_t i = 0, len; i < t.size(); i += len) {
    const int b = unicode_to_byte(decode_at(t, i, &len));
    if (b >= 0)
      bytes += static_cast<char>(b);
    else
      bytes.append(t, i, len);
  }
}

// Byte-level characters back to bytes (others kept as they are), then lossy UTF-8.
std::string byte_level(const std::vector<std::string>& tokens) {
  std::string bytes;
  for (const auto& t : tokens) append_byte_level(t, bytes);
  return utf8_sanitize(bytes);
}

}  // namespace

std::string run_decoder(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens) {
  for (const auto& s : steps) {
    switch (s.kind) {
      case DecoderStep::kReplace:
        for (auto& t : tokens) t = replace_all(t, s.text, s.content);
        break;
      case DecoderStep::kByteFallback:
        tokens = byte_fallback(std::move(tokens));
        break;
      case DecoderStep::kFuse: {
        std::string all;
        for (const auto& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::kStrip:
        for (auto& t : tokens) t = strip(s, t);
        break;
      case DecoderStep::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_all(tokens[i], s.text, " ");
          if (i == 0 && s.strip_first && !tokens[i].empty() && tokens[i][0] == ' ')
            tokens[i].erase(0, 1);
        }
        break;
      case DecoderStep::kByteLevel:
        tokens.assign(1, byte_level(tokens));
        break;
    }
  }
  std::string text;
  for (const auto& t : tokens) text += t;
  return text;
}

}  // namespace retnet::hf

namespace retnet::hf {

std::string token_surface(const std::vector<DecoderStep>& steps, const std::string& token) {
  std::string t = token;
  for (const auto& s : steps) {
    switch (s.kind) {
      case DecoderStep::kReplace:
        t = replace_all(t, s.text, s.content);
        break;
      case DecoderStep::kMetaspace:
        t = replace_all(t, s.text, " ");
        break;
      case DecoderStep::kByteFallback:
        if (const int b = byte_token(t); b >= 0) return std::string(1, static_cast<char>(b));
        break;
      case DecoderStep::kByteLevel: {
        std::string bytes;
        append_byte_level(t, bytes);
        t = std::move(bytes);
        break;
      }
      case DecoderStep::kFuse:
      case DecoderStep::kStrip:
        break;
    }
  }
  return t;
}

}  // namespace retnet::hf
