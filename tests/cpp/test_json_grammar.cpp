// Structured output (retnet/infer/json_schema.h, retnet/infer/grammar.h): the JSON grammars accept
// and refuse the right texts, the schema subset refuses what it does not cover by keyword, and the
// token mask allows exactly the tokens whose bytes continue a parse, multi-byte tokens included.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "retnet/core/json_parse.h"
#include "retnet/infer/decoder.h"
#include "retnet/infer/grammar.h"
#include "retnet/infer/json_schema.h"
#include "retnet/infer/structured_output.h"
#include "retnet/model/config.h"
#include "retnet/model/model.h"

namespace retnet {
namespace {

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  return GrammarRecognizer(g).matches(text);
}

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  return json_schema_grammar(nlohmann::ordered_json::parse(schema));
}

std::string schema_error_path(const std::string& schema) {
  try {
    schema_grammar(schema);
  } catch (const JsonSchemaError& e) {
    return e.path;
  }
  return "(accepted)";
}

TEST(JsonGrammar, AnyObjectAcceptsJsonObjectsOnly) {
  const auto g = json_object_grammar();
  for (const char* ok : {"{}", R"({"a":1})",
                         "{ \"a\" : [1, -2.5e3, \"x\\u00e9\\n\", true, null, "
                         "{\"b\": {}}],\n  \"c\": false }",
                         "{\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\":0}"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad :
       {"", "[]", "1", R"({"a"})", R"({"a":01})", "{'a':1}", R"({"a":1,})", "{} ", "{\"\xff\":1}",
        "{\"a\x01\":1}", "{\"\xed\xa0\x80\":1}", "{         }", R"({"a":1.})", R"({"a":tru})"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(JsonGrammar, ASchemaFixesPropertiesTypesAndBounds) {
  const auto g = schema_grammar(R"({"type": "object", "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 3},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", 2, null]}, "minItems": 1, "maxItems": 2}},
    "required": ["name"], "additionalProperties": false})");
  for (const char* ok : {R"({"name":"abc","age":3})", R"({"name":"\u00e9"})",
                         R"({ "name": "ab", "tags": ["a", null] })", R"({"name":"x","age":-40})"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad :
       {R"({"age":3})", R"({"name":"abcd"})", R"({"name":""})", R"({"name":"a","age":1.5})",
        R"({"name":"a","x":1})", R"({"age":3,"name":"a"})", R"({"name":"a","tags":[]})",
        R"({"name":"a","tags":["a","a","a"]})", R"({"name":"a","tags":["b"]})"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(JsonGrammar, AnyOfConstRefsAndTypeLists) {
  const auto tree = schema_grammar(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": ["integer", "null"]}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"]}}, "$ref": "#/$defs/node"})");
  EXPECT_TRUE(accepts(tree, R"({"v":1,"kids":[{"v":null,"kids":[]},{"v":2,"kids":[]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"v":1,"kids":[{"v":"x","kids":[]}]})"));
  const auto choice = schema_grammar(
      R"({"anyOf": [{"const": {"k": [1]}}, {"type": "boolean"}, {"type": "number"}], "title": "t"})");
  for (const char* ok : {R"({"k":[1]})", "true", "0.5", "-1E+2"})
    EXPECT_TRUE(accepts(choice, ok)) << ok;
  for (const char* bad : {R"({"k": [1]})", "null", "\"true\"", "1e1234"})
    EXPECT_FALSE(accepts(choice, bad)) << bad;
  EXPECT_TRUE(accepts(schema_grammar("{}"), "[1,{\"a\":\"b\"}]"));
}

TEST(JsonGrammar, KeywordsOutsideTheSubsetAreRefusedByPath) {
  EXPECT_EQ(schema_error_path(R"({"properties": {"a": {"type": "string", "pattern": "x"}}})"),
            "properties.a.pattern");
  EXPECT_EQ(schema_error_path(R"({"oneOf": [{}]})"), "oneOf");
  EXPECT_EQ(schema_error_path(R"({"type": "integer", "minimum": 3})"), "minimum");
  EXPECT_EQ(schema_error_path(R"({"properties": {}, "additionalProperties": true})"),
            "additionalProperties");
  EXPECT_EQ(schema_error_path(R"({"type": "date"})"), "type");
  EXPECT_EQ(schema_error_path(R"({"anyOf": [{}, {"items": [{}]}]})"), "anyOf[1].items");
  EXPECT_EQ(schema_error_path(R"({"type": "string", "maxLength": 5000})"), "maxLength");
  EXPECT_EQ(schema_error_path(R"({"$ref": "#/$defs/missing"})"), "$ref");
  EXPECT_EQ(schema_error_path(R"({"$ref": "#"})"), "$ref");  // a value that is only itself
  EXPECT_EQ(schema_error_path(R"({"required": ["a"]})"), "required");
  EXPECT_EQ(schema_error_path("false"), "");
}

// Byte tokens plus a few that span grammar symbols, as byte-level BPE has.
class SpanningTokens : public Tokenizer {
 public:
  SpanningTokens() {
    for (int b = 0; b < 256; ++b) pieces_.push_back(std::string(1, static_cast<char>(b)));
    for (const char* p : {"{\"", "\":", "\"}", "\":\"", "true", "null}", ", \"", "12", "]}", "ab"})
      pieces_.push_back(p);
    pieces_.push_back("");  // the end-of-sequence token's id
  }
  std::string kind() const override { return "test"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string token_bytes(int32_t id) const override { return pieces_[static_cast<size_t>(id)]; }
  int32_t eos_id() const override { return static_cast<int32_t>(pieces_.size() - 1); }
  std::string serialize() const override { return ""; }

 private:
  std::vector<std::string> pieces_;
};

TEST(JsonGrammar, TheMaskAllowsExactlyTheTokensThatContinueAParse) {
  const SpanningTokens tok;
  const auto trie = std::make_shared<const TokenTrie>(tok);
  const auto g = schema_grammar(R"({"type": "object", "properties": {"a": {"type": "string",
      "maxLength": 6}, "b": {"type": "array", "items": {"type": ["number", "boolean", "null"]},
      "maxItems": 3}}, "required": ["a"], "additionalProperties": false})");
  const int64_t V = tok.vocab_size();
  std::mt19937 rng(7);
  int spanning_taken = 0;
  for (int run = 0; run < 60; ++run) {
    GrammarConstraint c(g, trie);
    GrammarRecognizer shadow(g);
    std::string text;
    for (int step = 0; step < 200 && !c.must_end(); ++step) {
      std::vector<float> logits(static_cast<size_t>(V), 0.f);
      c.mask(logits.data(), V);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < V; ++t) {
        GrammarRecognizer probe = shadow;
        const std::string bytes = tok.token_bytes(t);
        const bool fits = t != tok.eos_id() && !bytes.empty() && probe.accept_bytes(bytes);
        ASSERT_EQ(std::isfinite(logits[static_cast<size_t>(t)]), fits)
            << "token " << t << " after '" << text << "'";
        if (fits) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << text;
      // Prefer the spanning tokens half of the time, so that they are exercised.
      std::vector<int32_t> spanning;
      for (int32_t t : allowed)
        if (t >= 256) spanning.push_back(t);
      const auto& pool = !spanning.empty() && rng() % 2 ? spanning : allowed;
      const int32_t t = pool[rng() % pool.size()];
      spanning_taken += t >= 256;
      c.accept(t);
      ASSERT_TRUE(shadow.accept_bytes(tok.token_bytes(t)));
      text += tok.token_bytes(t);
    }
    ASSERT_TRUE(c.must_end()) << text;
    const nlohmann::json v = parse_json(text, "constrained output");
    ASSERT_TRUE(v.is_object() && v.contains("a") && v["a"].is_string()) << text;
  }
  EXPECT_GT(spanning_taken, 20);
  GrammarConstraint c(g, trie);
  EXPECT_THROW(c.accept('['), Error);
}

TEST(JsonGrammar, ARandomModelSampledUnderTheConstraintWritesJson) {
  const Model m = Model::init(Config::from_json(R"({"decoder_embed_dim": 32,
    "decoder_value_embed_dim": 32, "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 32,
    "decoder_layers": 2, "vocab_size": 256})"),
                              4);
  const auto tok = make_byte_tokenizer();
  const auto trie = std::make_shared<const TokenTrie>(*tok);
  const auto g = schema_grammar(R"({"type": "object", "properties": {
      "id": {"type": "integer"}, "ok": {"type": "boolean"},
      "name": {"type": "string", "maxLength": 12}}, "required": ["id", "ok", "name"]})");
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Session s(m);
    s.add_sequence();
    const int32_t prompt[] = {'x'};
    s.prefill(0, prompt, 1);
    DecodeRule rule;
    rule.sampling.temperature = 1.0f;
    rule.sampling.seed = seed;
    rule.max_tokens = 400;
    rule.constraint = std::make_shared<GrammarConstraint>(g, trie);
    SequenceDecoder d(*tok, rule);
    std::string text;
    for (;;) {
      const SequenceDecoder::Next n = d.next(s, 0);
      text += n.text;
      if (n.finish != FinishReason::None) {
        ASSERT_EQ(n.finish, FinishReason::Stop) << text;
        break;
      }
      s.step(&n.token);
    }
    text += d.finish(nullptr);
    const nlohmann::json v = parse_json(text, "constrained output");
    EXPECT_TRUE(v["id"].is_number_integer() && v["ok"].is_boolean() && v["name"].is_string() &&
                v["name"].get<std::string>().size() <= 12 * 4)
        << text;
  }
}


// The memoized masks (interned states, an allowed set per state) are the masks a fresh walk of
// the trie gives, and a string's repeated state walks once.
TEST(JsonGrammar, MemoizedMasksAreTheWalksMasks) {
  const SpanningTokens tok;
  const auto trie = std::make_shared<const TokenTrie>(tok);
  const auto g = schema_grammar(R"({"type": "object", "properties": {"a": {"type": "string"},
      "b": {"type": "array", "items": {"type": "boolean"}}}, "required": ["a", "b"]})");
  const std::string text = R"({"a":"abababababababababab","b":[true,true,true]})";
  const int64_t V = tok.vocab_size();
  GrammarConstraint walked(g, trie, false), memoized(g, trie);
  int64_t steps = 0;
  for (unsigned char c : text) {
    std::vector<float> a(static_cast<size_t>(V), 0.f), b = a;
    walked.mask(a.data(), V);
    memoized.mask(b.data(), V);
    for (int64_t t = 0; t < V; ++t)
      ASSERT_EQ(std::isfinite(a[static_cast<size_t>(t)]), std::isfinite(b[static_cast<size_t>(t)]))
          << "token " << t << " at step " << steps;
    walked.accept(c);
    memoized.accept(c);
    ++steps;
  }
  EXPECT_TRUE(walked.must_end() && memoized.must_end());
  EXPECT_EQ(walked.walks(), steps);
  // The 20 bytes inside the string share one state; so do the repeated "true,".
  EXPECT_LT(memoized.walks(), steps - 20);

  // A bounded string has a state per length: past the limit of interned states (1,024) the
  // memoized masks are forgotten, or a walk that would pass it is redone afresh; the masks stay
  // the walks' masks.
  const auto bounded = schema_grammar(R"({"type": "string", "maxLength": 1000})");
  GrammarConstraint fresh(bounded, trie, false), capped(bounded, trie);
  const std::string long_text = "\"" + std::string(1000, 'a') + "\"";
  for (size_t i = 0; i < long_text.size(); ++i) {
    std::vector<float> a(static_cast<size_t>(V), 0.f), b = a;
    fresh.mask(a.data(), V);
    capped.mask(b.data(), V);
    for (int64_t t = 0; t < V; ++t)
      ASSERT_EQ(std::isfinite(a[static_cast<size_t>(t)]), std::isfinite(b[static_cast<size_t>(t)]))
          << "token " << t << " at byte " << i;
    fresh.accept(static_cast<unsigned char>(long_text[i]));
    capped.accept(static_cast<unsigned char>(long_text[i]));
  }
  EXPECT_TRUE(fresh.must_end() && capped.must_end());
}

// response_format, grammar and tools as the server and the Python package read them.
std::pair<std::string, std::string> structured_refusal(const std::string& request, bool chat) {
  try {
    parse_structured_output(nlohmann::ordered_json::parse(request), chat);
  } catch (const StructuredOutputError& e) {
    return {e.param, e.code};
  }
  return {"(accepted)", ""};
}

TEST(StructuredOutput, FieldsAreReadOrRefusedByName) {
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(structured_refusal(R"({"response_format": {"type": "xml"}})", false),
            P("response_format.type", "invalid_value"));
  EXPECT_EQ(structured_refusal(R"({"response_format": {"type": "json_object", "strict": true}})",
                               false),
            P("response_format.strict", "unsupported_field"));
  EXPECT_EQ(structured_refusal(R"({"response_format": {"type": "json_schema", "json_schema": {
      "schema": {"type": "string", "pattern": "a"}}}})", true),
            P("response_format.json_schema.schema.pattern", "unsupported_schema"));
  EXPECT_EQ(structured_refusal(R"({"grammar": "root ::= ("})", false),
            P("grammar", "invalid_grammar"));
  EXPECT_EQ(structured_refusal(R"({"tool_choice": "required"})", true),
            P("tool_choice", "invalid_value"));
  EXPECT_EQ(structured_refusal(R"({"tools": [{"type": "function", "function": {"name": "f",
      "parameters": {"oneOf": []}}}]})", true),
            P("tools[0].function.parameters.oneOf", "unsupported_schema"));
  EXPECT_EQ(structured_refusal(R"({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}})", true),
            P("tool_choice.function.name", "invalid_value"));
  // llama-server's json_object with a schema: the schema's values.
  const StructuredOutput s = parse_structured_output(nlohmann::ordered_json::parse(
      R"({"response_format": {"type": "json_object", "schema": {"enum": [1, 2]}}})"), false);
  EXPECT_TRUE(accepts(s.grammar, "2"));
  EXPECT_FALSE(accepts(s.grammar, "{}"));
  // Tools belong to a chat: a completion request leaves them to its own field checks.
  EXPECT_EQ(parse_structured_output(nlohmann::ordered_json::parse(R"({"tools": 3})"), false)
                .grammar,
            nullptr);
}

TEST(StructuredOutput, ToolChoicesGiveCallsAndProse) {
  const auto request = [](const std::string& choice) {
    return parse_structured_output(
        nlohmann::ordered_json::parse(R"({"tools": [{"type": "function", "function": {
            "name": "add", "parameters": {"type": "object", "properties": {"a": {"type":
            "integer"}}, "required": ["a"]}}}], "tool_choice": )" + choice + "}"),
        true);
  };
  const std::string call = R"({"name": "add", "arguments": {"a": 3}})";
  const StructuredOutput required = request(R"("required")");
  EXPECT_TRUE(required.tool_call && !required.prose_may_stop());
  EXPECT_TRUE(accepts(required.grammar, call));
  EXPECT_FALSE(accepts(required.grammar, "three"));
  EXPECT_TRUE(reply_is_call(required, call, "stop"));
  EXPECT_FALSE(reply_is_call(required, call, "length"));
  const StructuredOutput named = request(R"({"type": "function", "function": {"name": "add"}})");
  EXPECT_TRUE(named.tool_call && accepts(named.grammar, call));
  const StructuredOutput automatic = request(R"("auto")");
  EXPECT_TRUE(!automatic.tool_call && automatic.prose_may_stop());
  EXPECT_TRUE(accepts(automatic.grammar, call) && accepts(automatic.grammar, "It is 3."));
  EXPECT_FALSE(accepts(automatic.grammar, R"({"name": "sub")"));
  EXPECT_FALSE(reply_is_call(automatic, "It is 3.", "stop"));
  EXPECT_EQ(request(R"("none")").grammar, nullptr);
  const nlohmann::json calls = tool_calls_json(call, true);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "add");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"a":3})");
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["id"].get<std::string>().rfind("call_", 0), 0u);
  // A conversation's call comes back with its arguments as an object.
  const nlohmann::ordered_json history = history_tool_calls(
      nlohmann::json::parse(R"([{"id": "c", "function": {"name": "add", "arguments":
          "{\"a\": 3}"}}])"), "messages[1].tool_calls");
  EXPECT_EQ(history[0]["function"]["arguments"]["a"], 3);
  try {
    history_tool_calls(nlohmann::json::parse(R"([{"function": {"name": "add", "arguments":
        "{"}}])"), "messages[1].tool_calls");
    ADD_FAILURE() << "arguments that are not JSON were taken";
  } catch (const StructuredOutputError& e) {
    EXPECT_EQ(e.param, "messages[1].tool_calls[0].function.arguments");
  }
}

}  // namespace
}  // namespace retnet
