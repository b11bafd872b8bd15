// The template lexer: text between tags, whitespace control, and the tokens inside tags.
#include "lexer.h"

#include <algorithm>
#include <cstring>

#include "retnet/core/error.h"

namespace retnet::chat_template_detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin) : src_(source), origin_(origin) {
    // Jinja's default keep_trailing_newline=False.
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool trim_next = false;      // the previous tag ended with "-": strip all leading whitespace
    bool newline_next = false;   // trim_blocks: drop one leading newline
    while (true) {
      const size_t open = find_open(pos);
      std::string text = src_.substr(pos, (open == std::string::npos ? src_.size() : open) - pos);
      if (open == std::string::npos) {
        emit_text(std::move(text), pos, trim_next, newline_next);
        break;
      }
      const char kind = src_[open + 1];
      const char marker = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (marker == '-') {
        text.erase(std::find_if(text.rbegin(), text.rend(), [](char c) { return !is_space(c); }).base(), text.end());
      } else if (kind != '{' && marker != '+') {
        lstrip_block(text, pos);
      }
      emit_text(std::move(text), pos, trim_next, newline_next);
      size_t p = open + 2 + (marker == '-' || marker == '+' ? 1 : 0);
      bool right_minus = false, right_plus = false;
      if (kind == '#') {
        const size_t close = src_.find("#}", p);
        if (close == std::string::npos) fail(open, "unterminated comment (no '#}')");
        right_minus = close > p && src_[close - 1] == '-';
        right_plus = close > p && src_[close - 1] == '+';
        pos = close + 2;
      } else {
        tokens_.push_back({kind == '{' ? Token::Type::ExprBegin : Token::Type::StmtBegin, "", 0, 0});
        locate(tokens_.back(), open);
        pos = lex_tag(p, kind == '{' ? '}' : '%', open, right_minus, right_plus);
      }
      trim_next = right_minus;
      newline_next = kind != '{' && !right_plus;
    }
    tokens_.push_back({Token::Type::End, "", 0, 0});
    locate(tokens_.back(), src_.size());
    return std::move(tokens_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block tag go.
  void lstrip_block(std::string& text, size_t text_start) const {
    const size_t nl = text.rfind('\n');
    if (nl == std::string::npos && text_start != 0 && src_[text_start - 1] != '\n') return;
    const size_t from = nl == std::string::npos ? 0 : nl + 1;
    for (size_t i = from; i < text.size(); ++i)
      if (text[i] != ' ' && text[i] != '\t') return;
    text.erase(from);
  }

  void emit_text(std::string text, size_t at, bool trim_all, bool trim_newline) {
    if (trim_all) {
      text.erase(text.begin(), std::find_if(text.begin(), text.end(), [](char c) { return !is_space(c); }));
    } else if (trim_newline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);
    }
    if (text.empty()) return;
    tokens_.push_back({Token::Type::Text, std::move(text), 0, 0});
    locate(tokens_.back(), at);
  }

  // Tokens of one {{ }} or {% %} tag from `p`; returns the offset after its closer.
  size_t lex_tag(size_t p, char closer, size_t open, bool& right_minus, bool& right_plus) {
    int depth = 0;  // brackets open inside the tag: "}}" closes a dict there, not the tag
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) fail(open, closer == '}' ? "unterminated '{{' (no '}}')" : "unterminated '{%' (no '%}')");
      const char c = src_[p];
      auto closes_at = [&](size_t q) { return q + 1 < src_.size() && src_[q] == closer && src_[q + 1] == '}'; };
      if (depth == 0 && (c == '-' || c == '+') && closes_at(p + 1)) {
        (c == '-' ? right_minus : right_plus) = true;
        ++p;
        continue;
      }
      if (depth == 0 && closes_at(p)) {
        tokens_.push_back({closer == '}' ? Token::Type::ExprEnd : Token::Type::StmtEnd, "", 0, 0});
        locate(tokens_.back(), p);
        return p + 2;
      }
      Token t{Token::Type::Op, "", 0, 0};
      locate(t, p);
      if (is_name_start(c)) {
        size_t q = p;
        while (q < src_.size() && (is_name_start(src_[q]) || is_digit(src_[q]))) ++q;
        t.type = Token::Type::Name;
        t.text = src_.substr(p, q - p);
        p = q;
      } else if (is_digit(c)) {
        size_t q = p;
        while (q < src_.size() && (is_digit(src_[q]) || src_[q] == '_')) ++q;
        t.type = Token::Type::Int;
        if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
          t.type = Token::Type::Float;
          ++q;
          while (q < src_.size() && (is_digit(src_[q]) || src_[q] == '_')) ++q;
        }
        if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
          size_t r = q + 1;
          if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
          if (r < src_.size() && is_digit(src_[r])) {
            t.type = Token::Type::Float;
            q = r;
            while (q < src_.size() && is_digit(src_[q])) ++q;
          }
        }
        t.text = src_.substr(p, q - p);
        t.text.erase(std::remove(t.text.begin(), t.text.end(), '_'), t.text.end());
        p = q;
      } else if (c == '\'' || c == '"') {
        t.type = Token::Type::String;
        p = lex_string(p, t.text);
      } else {
        static const char* const two[] = {"**", "//", "==", "!=", "<=", ">="};
        bool matched = false;
        for (const char* op : two)
          if (src_.compare(p, 2, op) == 0) { t.text = std::string(op, 2); matched = true; break; }
        if (!matched) {
          if (!std::strchr("+-*/%~<>=()[]{},.:|", c)) fail(p, std::string("unexpected character '") + c + "'");
          t.text = std::string(1, c);
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        p += t.text.size();
      }
      tokens_.push_back(std::move(t));
    }
  }

  // A quoted string with Python's escapes; returns the offset after the closing quote.
  size_t lex_string(size_t p, std::string& out) const {
    const char quote = src_[p];
    const size_t start = p++;
    while (p < src_.size() && src_[p] != quote) {
      if (src_[p] != '\\' || p + 1 >= src_.size()) { out += src_[p++]; continue; }
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'u':
        case 'x': {
          const size_t n = e == 'u' ? 4 : 2;
          if (p + n > src_.size()) fail(p, "truncated escape in a string");
          uint32_t cp = 0;
          for (size_t i = 0; i < n; ++i) {
            const char h = src_[p + i];
            const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0) fail(p, "bad hex digit in a string escape");
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          p += n;
          append_utf8(cp, out);
          break;
        }
        default: out += '\\'; out += e;
      }
    }
    if (p >= src_.size()) fail(start, "unterminated string");
    return p + 1;
  }

  static void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) out += static_cast<char>(cp);
    else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
    else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  void locate(Token& t, size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    t.line = static_cast<int>(it - line_starts_.begin());
    t.column = static_cast<int>(offset - *(it - 1)) + 1;
  }

  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    Token t{Token::Type::End, std::string(), 0, 0};
    locate(t, offset);
    throw Error(fmt::format("chat template {}:{}:{}: {}", origin_, t.line, t.column, what));
  }

  std::string src_;
  const std::string& origin_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& origin) {
  return Lexer(source, origin).run();
}

}  // namespace retnet::chat_template_detail
