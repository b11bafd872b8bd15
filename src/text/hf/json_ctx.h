#pragma once
// Reading tokenizer.json values with Errors that name the file and the key.
#include <nlohmann/json.hpp>
#include <string>

#include "config.h"
#include "retnet/core/error.h"

namespace retnet::hf {

using nlohmann::json;

struct Ctx {
  const std::string& origin;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(fmt::format("'{}': tokenizer.json key '{}': {}", origin, key, what));
  }
  const json& member(const json& obj, const std::string& key, const std::string& name) const {
    if (!obj.is_object()) fail(key, "expected an object");
    auto it = obj.find(name);
    if (it == obj.end()) fail(key + "." + name, "missing");
    return *it;
  }
  std::string str(const json& obj, const std::string& key, const std::string& name,
                  const char* fallback = nullptr) const {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) {
      if (fallback) return fallback;
      fail(key + "." + name, "missing");
    }
    if (!it->is_string()) fail(key + "." + name, "expected a string");
    return it->get<std::string>();
  }
  bool flag(const json& obj, const std::string& key, const std::string& name, bool fallback) const {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(key + "." + name, "expected true or false");
    return it->get<bool>();
  }
  int64_t integer(const json& v, const std::string& key) const {
    if (!v.is_number_integer()) fail(key, "expected an integer");
    return v.get<int64_t>();
  }
  // The string of a {"String": s} pattern; a {"Regex": ...} one is rejected unless `regex` is
  // given, which then receives it.
  std::string pattern(const json& obj, const std::string& key, std::string* regex = nullptr) const {
    const json& p = member(obj, key, "pattern");
    if (p.is_object() && p.contains("String") && p["String"].is_string()) return p["String"];
    if (regex && p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
      *regex = p["Regex"];
      return "";
    }
    fail(key + ".pattern", "only a {\"String\": ...} pattern is supported here");
  }
  std::string type(const json& obj, const std::string& key) const {
    if (!obj.is_object()) fail(key, "expected an object");
    return str(obj, key, "type");
  }
};

// The "model" section (BPE only) and the added tokens and post-processor (config_model.cpp).
void parse_model(const Ctx& c, const json& root, Config& config);
void parse_added_and_post(const Ctx& c, const json& root, Config& config);

}  // namespace retnet::hf
