#pragma once
// Internal to the library: typed reads of a config JSON's fields, shared by the engine's config
// (config.cpp) and the Hugging Face config.json translation (hf_config.cpp, the mixers' *_hf.cpp).
// Each returns the fallback for a missing or null field and throws Error naming `origin` and the
// key otherwise.
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "retnet/core/error.h"
#include "retnet/model/config.h"

namespace retnet::detail {

// An integer, or a float with an integral value (1.0).
inline int64_t json_int(const nlohmann::json& j, const char* key, int64_t fallback,
                        const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const auto& v = j[key];
  RETNET_CHECK(v.is_number_integer() ||
                   (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
               "{}: '{}' must be an integer, got {}", origin, key, v.dump());
  // 2^63 as a double is the first value past int64_t (converting it would be undefined).
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX)
                        : v.is_number_float()  ? std::fabs(v.get<double>()) < 0x1p63
                                               : true;
  RETNET_CHECK(in_range, "{}: '{}' = {} is out of range (at most {})", origin, key, v.dump(),
               INT64_MAX);
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}

// A value of JSON type `is` (e.g. &nlohmann::json::is_boolean), described as `what` in errors.
template <typename T>
T json_typed(const nlohmann::json& j, const char* key, T fallback, const std::string& origin,
             bool (nlohmann::json::*is)() const noexcept, const char* what) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  RETNET_CHECK((j[key].*is)(), "{}: '{}' must be {}, got {}", origin, key, what, j[key].dump());
  return j[key].get<T>();
}

inline bool json_bool(const nlohmann::json& j, const char* key, bool fallback,
                      const std::string& origin) {
  return json_typed(j, key, fallback, origin, &nlohmann::json::is_boolean, "true or false");
}

inline double json_number(const nlohmann::json& j, const char* key, double fallback,
                          const std::string& origin) {
  return json_typed(j, key, fallback, origin, &nlohmann::json::is_number, "a number");
}

// Retention's feature map on q and k, by one of its names (Config's parse_qk_feature_map).
inline QkFeatureMap json_feature_map(const nlohmann::json& j, const char* key,
                                     QkFeatureMap fallback, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  RETNET_CHECK(j[key].is_string(), "{}: '{}' must be a name or null, got {}", origin, key,
               j[key].dump());
  try {
    return parse_qk_feature_map(j[key].get<std::string>());
  } catch (const Error& e) {
    throw Error(fmt::format("{}: '{}' = {} is not supported: {}", origin, key, j[key].dump(),
                            e.what()));
  }
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
