#include "retnet/infer/gbnf.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace retnet {
namespace {

using Alt = Grammar::Alternative;
using Range = std::pair<uint32_t, uint32_t>;  // code points, inclusive

constexpr int kMaxNesting = 64;            // parentheses: the parser recurses once per level
constexpr int64_t kMaxRepeat = 1024;       // the largest m or n of x{m,n}
constexpr int64_t kMaxElements = 1 << 20;  // the whole grammar, after repetitions are unrolled
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Code points [lo, hi] of one UTF-8 length as sequences of byte ranges, split until each byte
// position ranges independently (the classic UTF-8 range split, as RE2 does).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<Range>>& out) {
  const size_t n = utf8(lo).size();
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      utf8_sequences(lo, lo | m, out);
      utf8_sequences((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      utf8_sequences(lo, (hi & ~m) - 1, out);
      utf8_sequences(hi & ~m, hi, out);
      return;
    }
  }
  const std::string a = utf8(lo), b = utf8(hi);
  std::vector<Range> seq;
  for (size_t i = 0; i < n; ++i)
    seq.emplace_back(static_cast<unsigned char>(a[i]), static_cast<unsigned char>(b[i]));
  out.push_back(std::move(seq));
}

// Sorted, merged, without surrogates (which UTF-8 cannot encode).
std::vector<Range> normalize(std::vector<Range> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<Range> merged;
  for (const Range& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  std::vector<Range> out;
  for (const Range& r : merged) {
    if (r.second < 0xD800 || r.first > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.first < 0xD800) out.emplace_back(r.first, 0xD7FF);
    if (r.second > 0xDFFF) out.emplace_back(0xE000, r.second);
  }
  return out;
}

std::vector<Range> complement(const std::vector<Range>& ranges) {
  std::vector<Range> out;
  uint32_t next = 0;
  for (const Range& r : ranges) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return normalize(std::move(out));
}

class GbnfParser {
 public:
  explicit GbnfParser(const std::string& text) : text_(text) {}

  std::shared_ptr<const Grammar> parse() {
    for (;;) {
      space(true);
      if (pos_ == text_.size()) break;
      rule_definition();
    }
    for (const auto& [name, rule] : by_name_)
      if (!defined_[static_cast<size_t>(rule)]) {
        const auto [line, column] = first_use_.at(name);
        throw GbnfError(line, column, fmt::format("rule '{}' is used but not defined", name));
      }
    auto root = by_name_.find("root");
    if (root == by_name_.end()) fail("the grammar has no 'root' rule (where the output starts)");
    grammar_.root = root->second;
    const int32_t cycle = grammar_.left_recursive_rule();
    if (cycle >= 0)
      fail_at(where_[static_cast<size_t>(cycle)],
              fmt::format("rule '{}' is left-recursive: it reaches itself before any character "
                          "(write the repetition as x* or a right-recursive rule)",
                          names_[static_cast<size_t>(cycle)]));
    return std::make_shared<const Grammar>(std::move(grammar_));
  }

 private:
  [[noreturn]] void fail(const std::string& message) const { fail_at(pos_, message); }
  [[noreturn]] void fail_at(size_t at, const std::string& message) const {
    const auto [line, column] = line_column(at);
    throw GbnfError(line, column, message);
  }
  std::pair<int, int> line_column(size_t at) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return {line, column};
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  // Spaces, tabs and comments; newlines too where `newlines` (inside a group, after `::=`/`|`).
  void space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) fail("expected a rule name (letters, digits, '-', '_')");
    return text_.substr(start, pos_ - start);
  }

  int32_t rule_named(const std::string& n, size_t at) {
    auto it = by_name_.find(n);
    if (it != by_name_.end()) return it->second;
    const int32_t r = new_rule(n);
    by_name_[n] = r;
    first_use_[n] = line_column(at);
    return r;
  }
  int32_t new_rule(const std::string& n) {
    const int32_t r = grammar_.add_rule();
    names_.push_back(n);
    defined_.push_back(0);
    where_.push_back(pos_);
    return r;
  }
  // A rule made by the parser (a group, a repetition), named after the rule it serves.
  int32_t helper_rule(std::vector<Alt> alts) {
    const int32_t r = new_rule(fmt::format("{}-{}", current_, ++helpers_));
    defined_[static_cast<size_t>(r)] = 1;
    for (const Alt& a : alts) count(static_cast<int64_t>(a.size()));
    grammar_.rules[static_cast<size_t>(r)] = std::move(alts);
    return r;
  }
  void count(int64_t elements) {
    elements_ += elements;
    if (elements_ > kMaxElements)
      fail(fmt::format("the grammar is too large (over {} elements once repetitions are unrolled)",
                       kMaxElements));
  }

  void rule_definition() {
    const size_t start = pos_;
    current_ = name();
    const int32_t r = rule_named(current_, start);
    if (defined_[static_cast<size_t>(r)])
      fail_at(start, fmt::format("rule '{}' is defined twice", current_));
    defined_[static_cast<size_t>(r)] = 1;
    where_[static_cast<size_t>(r)] = start;
    helpers_ = 0;
    space(false);
    if (text_.compare(pos_, 3, "::=") != 0)
      fail(fmt::format("expected '::=' after '{}'", current_));
    pos_ += 3;
    space(true);
    std::vector<Alt> alts = alternatives(0);
    for (const Alt& a : alts) count(static_cast<int64_t>(a.size()));
    grammar_.rules[static_cast<size_t>(r)] = std::move(alts);
    if (!at_end() && peek() != '\n' && peek() != '\r')
      fail(fmt::format("unexpected '{}' (expected the end of the rule's line)", peek()));
  }

  std::vector<Alt> alternatives(int depth) {
    std::vector<Alt> alts;
    alts.push_back(sequence(depth));
    for (;;) {
      // An alternative may start a line of its own ("  | b"): no rule starts with '|'.
      const size_t end = pos_;
      space(true);
      if (peek() != '|') {
        pos_ = end;
        break;
      }
      ++pos_;
      space(true);
      alts.push_back(sequence(depth));
    }
    return alts;
  }

  // Elements up to '|', ')' or, outside a group, the end of the line.
  Alt sequence(int depth) {
    Alt alt;
    const bool nested = depth > 0;
    for (;;) {
      space(nested);
      const char c = peek();
      if (at_end() || c == '|' || c == ')' || c == '\n' || c == '\r') return alt;
      const size_t item_start = alt.size();
      if (c == '"') {
        literal(alt);
      } else if (c == '[') {
        alt.push_back(char_class());
      } else if (c == '.') {
        ++pos_;
        alt.push_back(any_char());
      } else if (c == '(') {
        if (depth + 1 > kMaxNesting) fail(fmt::format("groups nest deeper than {}", kMaxNesting));
        ++pos_;
        space(true);
        std::vector<Alt> inner = alternatives(depth + 1);
        space(true);
        if (peek() != ')') fail("expected ')' to close the group");
        ++pos_;
        alt.push_back(Grammar::rule_element(helper_rule(std::move(inner))));
      } else if (is_name_char(c)) {
        const size_t at = pos_;
        const std::string n = name();
        // "a ::= b\nc ::= d" without the newline: c would read as a reference.
        space(false);
        if (text_.compare(pos_, 3, "::=") == 0)
          fail_at(at, fmt::format("rule '{}' starts on the line of the rule before", n));
        alt.push_back(Grammar::rule_element(rule_named(n, at)));
      } else {
        fail(fmt::format("unexpected '{}' (expected a literal, a class, '.', '(' or a rule name)",
                         c));
      }
      repetition(alt, item_start, nested);
    }
  }

  void repetition(Alt& alt, size_t item_start, bool nested) {
    space(nested);
    const char c = peek();
    if (c != '*' && c != '+' && c != '?' && c != '{') return;
    const size_t at = pos_;
    ++pos_;
    int64_t lo = 0, hi = -1;  // hi -1: unbounded
    if (c == '+') lo = 1;
    if (c == '?') hi = 1;
    if (c == '{') {
      space(false);
      lo = peek() == ',' ? 0 : number();  // {,n}: up to n
      space(false);
      hi = lo;
      if (peek() == ',') {
        ++pos_;
        space(false);
        hi = peek() == '}' ? -1 : number();
        space(false);
      }
      if (peek() != '}') fail("expected '}' to close the repetition");
      ++pos_;
      if (hi >= 0 && hi < lo)
        fail_at(at, fmt::format("repetition {{{},{}}} has max < min", lo, hi));
    }
    if (alt.size() == item_start) fail_at(at, fmt::format("'{}' repeats nothing", c));
    // The repeated item as one element (a literal of several bytes becomes a rule).
    Alt item(alt.begin() + static_cast<std::ptrdiff_t>(item_start), alt.end());
    alt.resize(item_start);
    const Grammar::Element x =
        item.size() == 1 ? item[0] : Grammar::rule_element(helper_rule({item}));
    count(lo + (hi < 0 ? 2 : hi - lo) * 2);
    for (int64_t i = 0; i < lo; ++i) alt.push_back(x);
    if (hi < 0) {  // x*: ε | x x*
      const int32_t r = helper_rule({});
      grammar_.rules[static_cast<size_t>(r)] = {Alt{}, Alt{x, Grammar::rule_element(r)}};
      alt.push_back(Grammar::rule_element(r));
    } else if (hi > lo) {  // up to hi - lo more: ε | x (ε | x (...))
      int32_t r = helper_rule({Alt{}});
      for (int64_t i = 0; i < hi - lo; ++i)
        r = helper_rule({Alt{}, Alt{x, Grammar::rule_element(r)}});
      alt.push_back(Grammar::rule_element(r));
    }
  }

  int64_t number() {
    const size_t start = pos_;
    int64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      ++pos_;
      if (v > kMaxRepeat) fail_at(start, fmt::format("a repetition count above {}", kMaxRepeat));
    }
    if (pos_ == start) fail("expected a number");
    return v;
  }

  // One character of a literal or class: an escape or a UTF-8 character, as a code point.
  uint32_t character() {
    const size_t at = pos_;
    const unsigned char c = static_cast<unsigned char>(peek());
    if (c == '\n' || c == '\r' || at_end()) fail("unterminated literal or class");
    if (c == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
        case '\'':
          return static_cast<unsigned char>(e);
        case 'x':
          return hex(2, at);
        case 'u':
          return hex(4, at);
        case 'U':
          return hex(8, at);
        default:
          fail_at(at, fmt::format("unknown escape '\\{}'", e));
      }
    }
    // UTF-8: the lead byte says how many continuation bytes follow.
    const int extra = c < 0x80                 ? 0
                      : c >= 0xF0 && c <= 0xF4 ? 3
                      : c >= 0xE0              ? 2
                      : c >= 0xC2 && c < 0xE0  ? 1
                                               : -1;
    if (extra < 0) fail("the grammar is not valid UTF-8");
    uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    ++pos_;
    for (int i = 0; i < extra; ++i) {
      const unsigned char b = static_cast<unsigned char>(peek());
      if (at_end() || (b & 0xC0) != 0x80) fail_at(at, "the grammar is not valid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
      ++pos_;
    }
    const uint32_t smallest[] = {0, 0x80, 0x800, 0x10000};
    if (cp < smallest[extra] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      fail_at(at, "the grammar is not valid UTF-8");
    return cp;
  }

  uint32_t hex(int digits, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) fail_at(at, fmt::format("the escape needs {} hex digits", digits));
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF))
      fail_at(at, fmt::format("U+{:X} is not a character", v));
    return v;
  }

  void literal(Alt& alt) {
    ++pos_;  // the opening quote
    std::string bytes;
    while (peek() != '"') bytes += utf8(character());
    ++pos_;
    count(static_cast<int64_t>(bytes.size()));
    grammar_.append_literal(alt, bytes);
  }

  Grammar::Element char_class() {
    const size_t at = pos_;
    ++pos_;  // '['
    const bool negated = peek() == '^';
    if (negated) ++pos_;
    std::vector<Range> ranges;
    while (peek() != ']') {
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        ++pos_;
        hi = character();
        if (hi < lo) fail_at(at, fmt::format("the class range U+{:X}-U+{:X} is backwards", lo, hi));
      }
      ranges.emplace_back(lo, hi);
    }
    ++pos_;
    ranges = normalize(std::move(ranges));
    if (negated) ranges = complement(ranges);
    if (ranges.empty()) fail_at(at, "the class matches no character");
    return code_points(ranges);
  }

  Grammar::Element any_char() {
    if (any_char_ < 0) any_char_ = code_points({{0, kMaxCodePoint}}).index;
    return Grammar::rule_element(any_char_);
  }

  // A set of code points as UTF-8: one byte set when all are ASCII, else a rule of sequences.
  Grammar::Element code_points(const std::vector<Range>& ranges) {
    std::vector<std::vector<Range>> seqs;
    const uint32_t bounds[][2] = {
        {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xFFFF}, {0x10000, kMaxCodePoint}};
    for (Range r : normalize(ranges))
      for (const auto& b : bounds)
        if (r.first <= b[1] && r.second >= b[0])
          utf8_sequences(std::max(r.first, b[0]), std::min(r.second, b[1]), seqs);
    Grammar::ByteSet ascii{};
    std::vector<Alt> alts;
    for (const auto& seq : seqs) {
      if (seq.size() == 1) {
        const Grammar::ByteSet s = Grammar::bytes_in(static_cast<unsigned char>(seq[0].first),
                                                     static_cast<unsigned char>(seq[0].second));
        for (size_t i = 0; i < s.size(); ++i) ascii[i] |= s[i];
        continue;
      }
      Alt a;
      for (const Range& b : seq)
        a.push_back(grammar_.set_element(Grammar::bytes_in(static_cast<unsigned char>(b.first),
                                                           static_cast<unsigned char>(b.second))));
      alts.push_back(std::move(a));
    }
    const bool has_ascii = ascii != Grammar::ByteSet{};
    if (alts.empty()) return grammar_.set_element(ascii);
    if (has_ascii) alts.insert(alts.begin(), Alt{grammar_.set_element(ascii)});
    return Grammar::rule_element(helper_rule(std::move(alts)));
  }

  const std::string& text_;
  size_t pos_ = 0;
  Grammar grammar_;
  std::map<std::string, int32_t> by_name_;
  std::map<std::string, std::pair<int, int>> first_use_;
  std::vector<std::string> names_;
  std::vector<uint8_t> defined_;
  std::vector<size_t> where_;  // each rule's definition (a helper's: where its item is)
  std::string current_;
  int helpers_ = 0;
  int64_t elements_ = 0;
  int32_t any_char_ = -1;
};

}  // namespace

GbnfError::GbnfError(int line, int column, const std::string& message)
    : Error(fmt::format("grammar line {}, column {}: {}", line, column, message)),
      line(line),
      column(column) {}

std::shared_ptr<const Grammar> parse_gbnf(const std::string& text) {
  return GbnfParser(text).parse();
}

}  // namespace retnet
