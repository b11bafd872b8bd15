#pragma once
// Internal to src/model: typed reads of a config JSON's fields, shared by the engine's config
// (config.cpp) and the Hugging Face config.json translation (hf_config.cpp). Each returns the
// fallback for a missing or null field and throws Error naming `origin` and the key otherwise.
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "retnet/core/error.h"

namespace retnet::detail {

// An integer, or a float with an integral value (1.0).
inline int64_t json_int(const nlohmann::json& j, const char* key, int64_t fallback,
                        const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  RETNET_CHECK(v.is_number_integer() ||
                   (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
               "{}: '{}' must be an integer, got {}", origin, key, v.dump());
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}

inline bool json_bool(const nlohmann::json& j, const char* key, bool fallback,
                      const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  RETNET_CHECK(j[key].is_boolean(), "{}: '{}' must be true or false, got {}", origin, key,
               j[key].dump());
  return j[key].get<bool>();
}

inline double json_number(const nlohmann::json& j, const char* key, double fallback,
                          const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  RETNET_CHECK(j[key].is_number(), "{}: '{}' must be a number, got {}", origin, key,
               j[key].dump());
  return j[key].get<double>();
}

// One of a fixed set of names, e.g. {{"torchscale", Torchscale}, {"paper", Paper}}.
template <typename T, size_t N>
T json_choice(const nlohmann::json& j, const char* key, T fallback,
              const std::pair<const char*, T> (&choices)[N], const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const std::string name = j[key].is_string() ? j[key].get<std::string>() : "";
  std::string expected;
  for (const auto& [choice, value] : choices) {
    if (name == choice) return value;
    expected += (expected.empty() ? "\"" : ", \"") + std::string(choice) + "\"";
  }
  throw Error(fmt::format("{}: '{}' must be one of {}, got {}", origin, key, expected,
                          j[key].dump()));
}

}  // namespace retnet::detail
