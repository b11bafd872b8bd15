// Hostile inputs to the text parsers end in an Error that names the input and the limit, never in
// a stack overflow, a hang or a huge allocation: chat templates (nesting, values that nest or
// share themselves, tojson and indent widths) and the messages given to them.
#include <gtest/gtest.h>

#include <string>

#include "chat_template_fixture.h"
#include "retnet/core/error.h"
#include "retnet/text/chat_template.h"

using retnet::ChatTemplate;
using retnet::ChatTemplateLimits;
using ojson = nlohmann::ordered_json;

namespace text_limits_test {

using retnet::test::render;
using retnet::test::template_error_of;

std::string chain(const std::string& first, const std::string& link, int n) {
  std::string s = first;
  for (int i = 0; i < n; ++i) s += link;
  return s;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TextLimits, LeftLeaningChainsAreRefusedWhileParsing) {
  // Each of these parses without recursing and builds a tree 10,000 levels deep.
  for (const std::string& expr :
       {chain("1", " + 1", 10'000), chain("1", " ~ 1", 10'000), chain("1", " and 1", 10'000),
        chain("x", ".a", 10'000), chain("x", "[0]", 10'000), chain("x", "()", 10'000),
        chain("x", " | string", 10'000), chain("x", " is defined", 10'000),
        chain("1", " == 1", 10'000)}) {
    const std::string e = template_error_of("{{ " + expr + " }}");
    EXPECT_TRUE(has(e, "test.jinja:1:") && has(e, "expression nested deeper than 256 levels"))
        << e;
  }
  // Below the limit the same chains render.
  EXPECT_EQ(render("{{ " + chain("1", " + 1", 200) + " }}"), "201");
  EXPECT_EQ(render("{{ (" + chain("'a'", " ~ 'a'", 200) + ") | length }}"), "201");
}

TEST(TextLimits, RenderingNestingIsBoundedAcrossMacroCalls) {
  // A macro recursing 60 levels deep, each level inside a 50-level expression: within the macro
  // depth and the expression height, over the renderer's total nesting.
  const std::string deep = chain("", "[", 50) + "f(n - 1)" + chain("", "]", 50);
  const std::string source =
      "{% macro f(n) %}{% if n > 0 %}{{ " + deep + " }}{% endif %}{% endmacro %}{{ f(60) }}";
  std::string e = template_error_of(source);
  EXPECT_TRUE(has(e, "test.jinja") && has(e, "rendering nested deeper than 1024 levels")) << e;
  ChatTemplateLimits small;
  small.max_nesting = 50;
  e = template_error_of("{{ " + chain("", "[", 60) + "1" + chain("", "]", 60) + " }}", ojson::object(),
               small);
  EXPECT_TRUE(has(e, "rendering nested deeper than 50 levels")) << e;
  EXPECT_EQ(render("{{ " + chain("", "[", 40) + "1" + chain("", "]", 40) + " | length }}",
                   ojson::object(), small),
            "1");
}

TEST(TextLimits, ValuesThatNestOrShareThemselvesEndInErrors) {
  // A list wrapped in a list 100,000 times: refused when built, so printing or freeing it
  // cannot recurse that deep.
  std::string e = template_error_of(
      "{% set ns = namespace(x=0) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}{{ ns.x }}");
  EXPECT_TRUE(has(e, "test.jinja") && has(e, "list nested deeper than 256 levels")) << e;
  // A namespace that holds itself prints as an Error, not an endless recursion.
  for (const char* out : {"{{ ns }}", "{{ ns | tojson }}", "{{ ns == ns2 }}"}) {
    e = template_error_of(
        std::string(
            "{% set ns = namespace(a=1) %}{% set ns.self = ns %}{% set ns2 = namespace(a=1) %}"
            "{% set ns2.self = ns2 %}") +
        out);
    EXPECT_TRUE(has(e, "test.jinja") && has(e, "nested deeper than 256 levels"))
        << out << ": " << e;
  }
  // A list holding the same list twice, 40 times over: 2^40 items to print or compare.
  const std::string doubled =
      "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}{% "
      "endfor %}";
  e = template_error_of(doubled + "{{ ns.x }}");
  EXPECT_TRUE(has(e, "test.jinja") && has(e, "exceed the limit of 16777216 bytes")) << e;
  e = template_error_of(doubled + "{{ ns.x | tojson }}");
  EXPECT_TRUE(has(e, "tojson: the output would exceed the limit of 16777216 bytes")) << e;
  e = template_error_of(doubled + "{{ ns.x ~ '' }}");
  EXPECT_TRUE(has(e, "exceed the limit")) << e;
  e = template_error_of(
      doubled +
      "{% set ns2 = namespace(y=[1]) %}{% for i in range(40) %}{% set ns2.y = [ns2.y, ns2.y] "
      "%}{% endfor %}{{ ns.x == ns2.y }}");
  EXPECT_TRUE(has(e, "comparing two values visited more than")) << e;
  e = template_error_of(
      doubled +
      "{% set ns2 = namespace(y=[1]) %}{% for i in range(40) %}{% set ns2.y = [ns2.y, ns2.y] "
      "%}{% endfor %}{{ ns.x < ns2.y + [2] }}");
  EXPECT_TRUE(has(e, "comparing two values visited more than")) << e;
}

TEST(TextLimits, TojsonAndIndentWidthsAreExactOrRefused) {
  const std::string pad(300, ' ');
  EXPECT_EQ(render("{{ [1, {'a': 2}] | tojson(indent=300) }}"),
            "[\n" + pad + "1,\n" + pad + "{\n" + pad + pad + "\"a\": 2\n" + pad + "}\n]");
  // Python: indent=0 (and below) inserts newlines only; None keeps one line.
  EXPECT_EQ(render("{{ [1, 2] | tojson(indent=0) }}|{{ [1, 2] | tojson(indent=-3) }}|{{ [1, 2] | "
                   "tojson(indent=none) }}"),
            "[\n1,\n2\n]|[\n1,\n2\n]|[1, 2]");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(300) }}"), "a\n" + pad + "b");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(-2) }}|{{ 'a\\nb' | indent('--') }}"), "a\nb|a\n--b");
  std::string e = template_error_of("{{ [1] | tojson(indent=1000000000) }}");
  EXPECT_TRUE(has(e, "test.jinja:1:") &&
              has(e, "tojson: the output would exceed the limit of 16777216 bytes"))
      << e;
  e = template_error_of("{{ 'a\\nb' | indent(1000000000) }}");
  EXPECT_TRUE(has(e, "test.jinja") &&
              has(e, "indent's width of 1000000000 would exceed the limit of 16777216"))
      << e;
  e = template_error_of("{{ [1] | tojson(indent='  ') }}");
  EXPECT_TRUE(has(e, "filter 'tojson': indent must be an integer or None, got a str")) << e;
  e = template_error_of("{{ 'a' | indent(1.5) }}");
  EXPECT_TRUE(has(e, "filter 'indent': width must be an integer or a string, got a float")) << e;
}

TEST(TextLimits, TemplateSizeIsBounded) {
  ChatTemplateLimits small;
  small.max_output_bytes = 1000;
  std::string e;
  try {
    ChatTemplate::parse(std::string(2000, 'x'), "big.jinja", small);
  } catch (const retnet::Error& err) {
    e = err.what();
  }
  EXPECT_TRUE(has(e, "big.jinja") && has(e, "2000 bytes, over the limit of 1000")) << e;
}

std::string messages_error(const ojson& messages, const ojson& extra = ojson::object(),
                           const ChatTemplateLimits& limits = {},
                           const std::string& source = retnet::default_chat_template()) {
  const ChatTemplate t = ChatTemplate::parse(source, "msgs.jinja", limits);
  try {
    retnet::apply_chat_template(t, messages, true, "<s>", "</s>", extra);
  } catch (const retnet::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TextLimits, MessagesOfTheWrongShapeAreNamed) {
  EXPECT_EQ(messages_error(ojson::parse(
                R"([{"role": "user", "content": "hi"}, {"role": "user", "content": null},
      {"role": "user", "content": [{"type": "text", "text": "x"}]}])")),
            "");
  std::string e = messages_error(ojson::parse(R"([{"role": "user", "content": 5}])"));
  EXPECT_TRUE(has(e, "msgs.jinja") &&
              has(e, "messages[0].content must be a string, a list of parts or null, got number"))
      << e;
  e = messages_error(
      ojson::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": {"x": 1}}])"));
  EXPECT_TRUE(has(e, "messages[1].content must be")) << e;
  e = messages_error(ojson::parse(R"([{"role": "user", "content": ["text"]}])"));
  EXPECT_TRUE(has(e, "messages[0].content[0] must be an object")) << e;
  e = messages_error(ojson::parse(R"([{"role": 3, "content": "a"}])"));
  EXPECT_TRUE(has(e, "messages[0].role must be a string, got number")) << e;
  e = messages_error(ojson::parse(R"([{"content": "a"}])"));
  EXPECT_TRUE(has(e, "messages[0].role must be a string, got nothing")) << e;
  e = messages_error(ojson::parse(R"(["hello"])"));
  EXPECT_TRUE(has(e, "messages[0] must be an object")) << e;
}

TEST(TextLimits, MessagesMustBeUtf8AndBounded) {
  ojson m = ojson::parse(R"([{"role": "user", "content": [{"type": "text", "text": "ok"}]}])");
  m[0]["content"][0]["text"] = std::string("ab\xff");
  std::string e = messages_error(m);
  EXPECT_TRUE(has(
      e, "msgs.jinja: messages[0].content[0].text is not valid UTF-8 (bad byte 0xff at offset 2)"))
      << e;
  e = messages_error(ojson::parse(R"([{"role": "user", "content": "a"}])"),
                     ojson{{"tools", ojson::array({std::string("\xc3")})}});
  EXPECT_TRUE(has(e, "the variables.tools[0] is not valid UTF-8")) << e;
  // More messages than a render may hold as list items (max_output_bytes / 16).
  ChatTemplateLimits small;
  small.max_output_bytes = 1600;
  const ojson one = ojson::parse(R"({"role": "user", "content": ""})");
  ojson many = ojson::array();
  for (int i = 0; i < 101; ++i) many.push_back(one);
  e = messages_error(many, ojson::object(), small);
  EXPECT_TRUE(has(e, "101 messages, over the limit of 100")) << e;
  many.erase(many.begin());
  EXPECT_EQ(messages_error(many, ojson::object(), small, "{{ messages | length }}"), "");
  // Deeper than parse_json allows, when built in code.
  ojson deep = "x";
  for (int i = 0; i < 200; ++i) deep = ojson::array({deep});
  e = messages_error(ojson::array({ojson{{"role", "user"}, {"content", "a"}, {"extra", deep}}}));
  EXPECT_TRUE(has(e, "nested deeper than 128 levels")) << e;
}

}  // namespace text_limits_test
