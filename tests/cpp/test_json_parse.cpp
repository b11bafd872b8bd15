// parse_json: JSON from outside within limits, errors that say where.
#include <gtest/gtest.h>

#include <string>

#include "retnet/core/json_parse.h"
#include "retnet/model/config.h"

namespace retnet {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_json(text, "the input");
  } catch (const JsonParseError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonParse, ParsesOrdinaryValues) {
  const auto j = parse_json(R"({"a": [1, 2.5, "x", null, true], "b": {"c": -3}})", "t");
  EXPECT_EQ(j["a"][1], 2.5);
  EXPECT_EQ(j["b"]["c"], -3);
  const auto o = parse_ordered_json(R"({"z": 1, "a": 2})", "t");
  EXPECT_EQ(o.begin().key(), "z");
}

TEST(JsonParse, RefusesDeepNestingWithoutRecursing) {
  for (const char* open : {"[", "{\"k\":"}) {
    std::string deep;
    for (int i = 0; i < 100000; ++i) deep += open;
    const std::string e = error_of(deep);
    EXPECT_NE(e.find("nested deeper than 128 levels"), std::string::npos) << e;
    EXPECT_NE(e.find("the input"), std::string::npos) << e;
  }
  std::string ok;
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += "[";
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += "]";
  EXPECT_NO_THROW(parse_json(ok, "t"));
  EXPECT_TRUE(is_valid_json(ok));
  EXPECT_FALSE(is_valid_json("[" + ok + "]"));
}

TEST(JsonParse, NamesTheFieldOfANumberOutOfRange) {
  const std::string e = error_of(R"({"messages": [{"a": 1}, {"max_tokens": 1e400}]})");
  EXPECT_NE(e.find("messages[1].max_tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("1e400 is out of range"), std::string::npos) << e;
  try {
    parse_json(R"({"temperature": -1e999})", "body");
    FAIL();
  } catch (const JsonParseError& err) {
    EXPECT_EQ(err.failure().path, "temperature");
  }
}

TEST(JsonParse, SyntaxErrorsSayWhere) {
  const std::string e = error_of(R"({"a": [1, 2,]})");
  EXPECT_NE(e.find("the input: not valid JSON at byte"), std::string::npos) << e;
  EXPECT_NE(e.find("a[2]"), std::string::npos) << e;
  EXPECT_NE(error_of("\"\xff\"").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{} {}").find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(is_valid_json("nul"));
}

}  // namespace
}  // namespace retnet

namespace retnet {
namespace {

// Found by the config fuzzer: an integral float past int64_t was converted (undefined behaviour).
TEST(JsonParse, ConfigIntegersPastInt64AreRefused) {
  for (const char* v : {"2.56e94", "9223372036854775808", "18446744073709551615", "-1e19"}) {
    try {
      Config::from_json(fmt::format(R"({{"vocab_size": {}}})", v), "c.json");
      FAIL() << v;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'vocab_size'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace retnet
