#include "retnet/core/json_parse.h"

#include <fmt/format.h>

#include <vector>

#include "retnet/core/error.h"

namespace retnet {
namespace {

struct TooDeep {};  // thrown from a SAX callback to stop at the depth limit

// nlohmann's DOM builder behind a SAX front that counts depth and remembers the path, so that an
// error can say where it happened. Throwing from a callback unwinds sax_parse cleanly.
template <class Json>
class BoundedSax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedSax(Json& result, int max_depth) : dom_(result, true), max_depth_(max_depth) {}

  bool null() { return value(dom_.null()); }
  bool boolean(bool v) { return value(dom_.boolean(v)); }
  bool number_integer(number_integer_t v) { return value(dom_.number_integer(v)); }
  bool number_unsigned(number_unsigned_t v) { return value(dom_.number_unsigned(v)); }
  bool number_float(number_float_t v, const string_t& s) { return value(dom_.number_float(v, s)); }
  bool string(string_t& v) { return value(dom_.string(v)); }
  bool binary(binary_t& v) { return value(dom_.binary(v)); }
  bool start_object(std::size_t n) {
    enter(false);
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    levels_.back().key = k;
    return dom_.key(k);
  }
  bool end_object() {
    levels_.pop_back();
    return value(dom_.end_object());
  }
  bool start_array(std::size_t n) {
    enter(true);
    return dom_.start_array(n);
  }
  bool end_array() {
    levels_.pop_back();
    return value(dom_.end_array());
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    failure_ = {reason_of(e, token), path(), position};
    return false;
  }

  const JsonParseFailure& failure() const { return failure_; }

 private:
  struct Level {
    bool array = false;
    size_t index = 0;
    std::string key;
  };

  void enter(bool array) {
    if (static_cast<int>(levels_.size()) >= max_depth_) {
      failure_ = {fmt::format("nested deeper than {} levels", max_depth_), path(), 0};
      throw TooDeep{};  // caught in parse_bounded, which reports failure_
    }
    levels_.push_back({array, 0, {}});
  }
  // A finished value moves its enclosing array on to the next index.
  bool value(bool ok) {
    if (!levels_.empty() && levels_.back().array) levels_.back().index += 1;
    return ok;
  }
  std::string path() const {
    std::string p;
    for (const auto& l : levels_) {
      if (l.array) {
        p += fmt::format("[{}]", l.index);
      } else if (!l.key.empty() || !p.empty()) {
        if (!p.empty()) p += '.';
        p += l.key.size() > 64 ? l.key.substr(0, 64) + "..." : l.key;
      }
    }
    // A path 128 levels deep would bury the message: its tail says where.
    if (p.size() <= 160) return p;
    const size_t cut = p.find_first_of(".[", p.size() - 120);  // whole steps, whole characters
    return cut == std::string::npos ? "..." : "..." + p.substr(cut);
  }
  static std::string reason_of(const nlohmann::detail::exception& e, const std::string& token) {
    const std::string shown = token.size() > 40 ? token.substr(0, 40) + "..." : token;
    if (e.id == 406) return fmt::format("the number {} is out of range", shown);
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 3:
    // syntax error while parsing value - ..."; keep what follows the last " - ".
    std::string m = e.what();
    const size_t dash = m.rfind(" - ");
    return dash == std::string::npos ? m : m.substr(dash + 3);
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  int max_depth_;
  std::vector<Level> levels_;
  JsonParseFailure failure_;
};

template <class Json>
bool parse_bounded(std::string_view text, int max_depth, Json& out, JsonParseFailure& failure) {
  BoundedSax<Json> sax(out, max_depth);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const TooDeep&) {
    ok = false;
  }
  if (!ok) failure = sax.failure();
  return ok;
}

template <class Json>
Json parse_or_throw(std::string_view text, const std::string& what, int max_depth) {
  Json out;
  JsonParseFailure f;
  if (parse_bounded(text, max_depth, out, f)) return out;
  const std::string at = f.byte > 0 ? fmt::format(" at byte {}", f.byte) : "";
  const std::string in = f.path.empty() ? "" : fmt::format(" (in '{}')", f.path);
  throw JsonParseError(fmt::format("{}: not valid JSON{}{}: {}", what, at, in, f.reason), f);
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth) {
  return parse_or_throw<nlohmann::json>(text, what, max_depth);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what,
                                          int max_depth) {
  return parse_or_throw<nlohmann::ordered_json>(text, what, max_depth);
}

bool is_valid_json(std::string_view text, int max_depth) {
  nlohmann::json out;
  JsonParseFailure f;
  return parse_bounded(text, max_depth, out, f);
}

}  // namespace retnet
