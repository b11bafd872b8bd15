// The chat-template engine against hand-computed Python/Jinja results: expressions, control flow,
// whitespace control as transformers configures it, errors with positions, and hostile templates
// that must end in an Error quickly instead of hanging or exhausting memory.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "retnet/core/error.h"
#include "chat_template_fixture.h"
#include "retnet/text/chat_template.h"

using retnet::ChatTemplate;
using retnet::ChatTemplateLimits;
using ojson = nlohmann::ordered_json;

namespace {

using retnet::test::render;
using retnet::test::template_error_of;

TEST(ChatTemplate, ArithmeticFollowsPython) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 0 }}"), "7 9 1024 1");  // Jinja's ** groups left
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }}"), "3 -4 -4 2 -2");
  EXPECT_EQ(render("{{ 1 / 2 }} {{ 4 / 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ -0.0 }}"),
            "0.5 2.0 0.30000000000000004 1e+20 1.5e-05 0.0001 -0.0");
  EXPECT_EQ(render("{{ -3 }} {{ +3 }} {{ -(2 - 5) }} {{ 3 - 1.5 }} {{ 'ab' * 3 }}"), "-3 3 3 1.5 ababab");
  EXPECT_NE(template_error_of("{{ 1 // 0 }}").find("division"), std::string::npos);
  EXPECT_NE(template_error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
}

TEST(ChatTemplate, StringsListsAndDicts) {
  EXPECT_EQ(render("{{ 'a' + \"b\" }}{{ 'c' ~ 1 ~ none }}{{ 'x\\ty\\n' | length }}"), "abc1None4");
  EXPECT_EQ(render("{{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': [1.0]} }}"), "[1, 'a', None, True] {'k': 'v', 'n': [1.0]}");
  EXPECT_EQ(
      render("{{ xs[0] }}{{ xs[-1] }}{{ xs[5] }}|{{ d.a }}{{ d['b'] }}{{ d.missing }}|{{ xs.1 }}",
             ojson{{"xs", {1, 2, 3}}, {"d", {{"a", "A"}, {"b", "B"}}}}),
      "13|AB|2");
  const ojson v = {{"xs", {0, 1, 2, 3, 4, 5}}, {"s", "añb€c"}};
  EXPECT_EQ(render("{{ xs[1:3] }} {{ xs[::-1] }} {{ xs[-2:] }} {{ xs[::2] }} {{ xs[4:1:-1] }} {{ xs[:100] | length }}", v),
            "[1, 2] [5, 4, 3, 2, 1, 0] [4, 5] [0, 2, 4] [4, 3, 2] 6");
  // Strings index by code point, as Python's str does.
  EXPECT_EQ(render("{{ s[1] }} {{ s[::-1] }} {{ s | length }} {{ s[-2:] }}", v), "ñ c€bña 5 €c");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} {{ 'z' in undefined_thing }}"),
            "True True True True False");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }} {{ none == none }}"),
            "True True True True True");
}

TEST(ChatTemplate, LogicReturnsOperandsAndTernaries) {
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }}| {{ not [] }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}]"),
            "x b | True n []");
  EXPECT_EQ(render("{{ not a is defined }} {{ a is not defined }} {{ not 1 in [1] }}"), "True True False");
}

TEST(ChatTemplate, Tests) {
  const ojson v = {{"s", "x"},           {"n", nullptr}, {"i", 3},
                   {"f", 1.5},           {"b", true},    {"d", ojson::object()},
                   {"l", ojson::array()}};
  EXPECT_EQ(render("{{ s is string }}{{ n is none }}{{ i is integer }}{{ f is float }}{{ i is number }}{{ b is boolean }}"
                   "{{ d is mapping }}{{ l is iterable }}{{ s is sequence }}{{ missing is undefined }}{{ i is odd }}"
                   "{{ 4 is even }}{{ 9 is divisibleby(3) }}{{ s is equalto 'x' }}{{ b is true }}{{ 'ab' is lower }}",
                   v),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ i is string }}{{ b is number }}{{ s is mapping }}{{ n is defined }}", v), "FalseFalseFalseTrue");
}

TEST(ChatTemplate, FiltersAndMethods) {
  const ojson msgs = {{"ms",
                       {{{"role", "system"}, {"content", " hi "}},
                        {{"role", "user"}, {"content", "yo"}},
                        {{"role", "user"}, {"content", "ok"}}}}};
  EXPECT_EQ(render("{{ ms | map(attribute='role') | join(',') }}|{{ ms | selectattr('role', 'equalto', 'user') | list | length }}"
                   "|{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='content') | first | trim }}"
                   "|{{ (ms | last).content }}|{{ ms | map(attribute='role') | unique | list }}"
                   "|{{ ms | join('/', attribute='content') }}",
                   msgs),
            "system,user,user|2|hi|ok|['system', 'user']| hi /yo/ok");
  EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ 'ab' | upper }}{{ 'AB' | lower }}|{{ 'hello wORLD' | title }}|{{ 'hELLO' | capitalize }}"),
            "a b|ABab|Hello World|Hello");
  EXPECT_EQ(render("{{ x | default('d') }}{{ '' | default('e') }}{{ '' | default('f', true) }}{{ none | default('g') }}"),
            "dfNone");
  EXPECT_EQ(render("{{ ' x '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}"
                   "|{{ 'a,b,c'.split(',', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}"
                   "|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'a-b'.replace('-', '') }}|{{ '-'.join(['a', 'b']) }}|{{ 'hi'.upper() }}"),
            "x|a|['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b,c']|TrueTrue|bba|ab|a-b|HI");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d | items | list | "
                   "length }}{{ d.get('z', 0) }}{{ d.keys() | list }}",
                   ojson{{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;20['b', 'a']");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) | first }} {{ [1, 2] | reverse | list }} "
                   "{{ [1, 2, 3] | sum }} {{ [4, 2] | min }} {{ 'x' | string }} {{ '42' | int + 1 }} {{ 2 | float }} {{ -3 | abs }}"),
            "[1, 2, 3] 3 [2, 1] 6 2 x 43 2.0 3");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"), "a\n  b\n\n  c|  a\n  b");
  EXPECT_NE(template_error_of("{{ 1 | nosuchfilter }}").find("unknown filter 'nosuchfilter'"),
            std::string::npos);
}

TEST(ChatTemplate, ToJsonMatchesPythonJsonDumps) {
  const ojson v =
      ojson::parse(R"({"z": 1, "a": [true, null, 1.5, "é\"\n\u0001"], "e": {}, "l": []})");
  EXPECT_EQ(render("{{ v | tojson }}", {{"v", v}}),
            R"({"z": 1, "a": [true, null, 1.5, "é\"\n\u0001"], "e": {}, "l": []})");
  EXPECT_EQ(
      render("{{ v | tojson(indent=2) }}", {{"v", ojson::parse(R"({"a": [1, 2], "b": {}})")}}),
      "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(
      render("{{ v | tojson(sort_keys=true) }}", {{"v", ojson::parse(R"({"b": 1, "a": 2})")}}),
      R"({"a": 2, "b": 1})");
}

TEST(ChatTemplate, ControlFlow) {
  EXPECT_EQ(render("{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", {{"x", 2}}), "two");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            "1021TrueFalse2;2110FalseTrue2;");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}{% for c in 'añ' %}[{{ c }}]{% endfor %}"), "empty[a][ñ]");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"), "2/2 4/2 ");
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{% if x > 3 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "023");
  EXPECT_EQ(render("{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %}{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"),
            "pq37");
  EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }}"), "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
}

TEST(ChatTemplate, ScopesNamespacesAndMacros) {
  // A set inside a loop stays there (hence namespace()); a set inside an if does not.
  EXPECT_EQ(render("{% set n = 0 %}{% for x in [1, 2] %}{% set n = n + x %}{% endfor %}{{ n }}"), "0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}"), "3");
  EXPECT_EQ(render("{% if true %}{% set y = 'in' %}{% endif %}{{ y }}"), "in");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set t %}x{{ 1 + 1 }}{% endset %}{{ t }}"), "21x2");
  EXPECT_EQ(render("{% macro m(who, greet='hi') %}{{ greet }} {{ who }}{% endmacro %}{{ m('a') }}|{{ m('b', greet='yo') }}|{{ m(who='c') }}"),
            "hi a|yo b|hi c");
  EXPECT_EQ(render("{% set s = 'x' %}{% macro f() %}{{ s }}{% endmacro %}{% for i in [1] %}{{ f() }}{% endfor %}"), "x");
  EXPECT_NE(template_error_of("{% set x = 1 %}{% set x.a = 2 %}").find("not a namespace"),
            std::string::npos);
  // Self-references are allowed (and freed after the render: the ASan pass checks for leaks).
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{% set ns.l = [ns] %}{{ ns.self.self.a }}"
                   "{% macro m() %}{{ ns.a }}{% endmacro %}{% set ns.m = m %}{{ ns.m() }}"),
            "11");
  EXPECT_NE(template_error_of("{% set ns = namespace() %}{% for i in [1] %}{% macro m() %}x{% "
                              "endmacro %}{% set ns.m = m %}"
                              "{% endfor %}{{ ns.m() }}")
                .find("after the loop that defined it ended"),
            std::string::npos);
  EXPECT_NE(
      template_error_of("{% macro m() %}{% endmacro %}{{ m(nope=1) }}").find("no parameter 'nope'"),
      std::string::npos);
}

TEST(ChatTemplate, WhitespaceControlAsTransformers) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one goes.
  EXPECT_EQ(render("{% if true %}\n  yes\n{% endif %}\nend"), "  yes\nend");
  EXPECT_EQ(render("<\n    {% if true %}\n    a\n    {% endif %}\n>"), "<\n    a\n>");
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");  // not at a line start: kept
  EXPECT_EQ(render("  {{ 'x' }}\n"), "  x");                     // expressions keep theirs; one trailing newline goes
  EXPECT_EQ(render("a\n\n  {%- if true -%}  \n\n b  {%- endif %}"), "ab");
  EXPECT_EQ(render("a {{- ' b ' -}} c"), "a b c");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(render("a\n{# comment #}\nb {#- trimmed -#} c"), "a\nbc");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
  EXPECT_EQ(render("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");  // "}}" inside a dict does not close
}

TEST(ChatTemplate, SyntaxErrorsNameTheTemplateLineAndColumn) {
  EXPECT_NE(template_error_of("ok\n  {{ 1 + }}").find("test.jinja:2:10: expected an expression"),
            std::string::npos)
      << template_error_of("ok\n  {{ 1 + }}");
  EXPECT_NE(template_error_of("{% if x %}never closed")
                .find("test.jinja:1:23: unexpected end of template: expected {% elif %}"),
            std::string::npos)
      << template_error_of("{% if x %}never closed");
  EXPECT_NE(template_error_of("a\nb {{ x").find("test.jinja:2:3: unterminated '{{'"),
            std::string::npos);
  EXPECT_NE(template_error_of("{% frobnicate %}")
                .find("test.jinja:1:4: unknown or misplaced statement 'frobnicate'"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ 'abc }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(template_error_of("{{ a $ b }}").find("unexpected character '$'"), std::string::npos);
  EXPECT_NE(template_error_of("{# open").find("unterminated comment"), std::string::npos);
  EXPECT_NE(template_error_of("{% endfor %}").find("misplaced statement 'endfor'"),
            std::string::npos);
  EXPECT_NE(template_error_of("{% break %}").find("outside a for loop"), std::string::npos);
}

TEST(ChatTemplate, RuntimeErrorsNameTheTemplateAndPlace) {
  EXPECT_EQ(template_error_of("line1\n{{ raise_exception('Roles must alternate') }}"),
            "chat template test.jinja:2:4: raise_exception: Roles must alternate");
  EXPECT_NE(template_error_of("{{ m.content }}").find("'m' is undefined"), std::string::npos);
  EXPECT_NE(template_error_of("{{ nofunc(1) }}").find("'nofunc' is undefined"), std::string::npos);
  EXPECT_NE(template_error_of("{% for x in 3 %}{% endfor %}").find("int is not iterable"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ x }}", ojson::array()).find("must be a JSON object"),
            std::string::npos);
}

TEST(ChatTemplate, HostileTemplatesEndInErrors) {
  const auto t0 = std::chrono::steady_clock::now();
  ChatTemplateLimits small;
  small.max_steps = 300'000;
  small.max_output_bytes = 1 << 20;
  ChatTemplateLimits small_output = small;  // the size limit fires before the step budget
  small_output.max_steps = 100'000'000;
  // Runaway loops hit the step budget.
  EXPECT_NE(template_error_of(
                "{% for i in range(60000) %}{% for j in range(60000) %}{% endfor %}{% endfor %}",
                ojson::object(), small)
                .find("steps"),
            std::string::npos);
  // Doubling a string or a list hits the size limit long before memory runs out.
  EXPECT_NE(template_error_of("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set "
                              "ns.s = ns.s + ns.s %}{% endfor %}",
                              ojson::object(), small_output)
                .find("exceed the limit"),
            std::string::npos);
  EXPECT_NE(template_error_of("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l "
                              "= ns.l + ns.l %}{% endfor %}",
                              ojson::object(), small_output)
                .find("exceed the limit"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ 'x' * 1000000000000 }}", ojson::object(), small).find("string"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ range(1000000000000) | length }}", ojson::object(), small)
                .find("range()"),
            std::string::npos);
  EXPECT_NE(template_error_of("{% for i in range(1000) %}{{ 'y' * 10000 }}{% endfor %}",
                              ojson::object(), small_output)
                .find("the output"),
            std::string::npos);
  // Unbounded recursion hits the depth limit; deep nesting is refused by the parser.
  EXPECT_NE(template_error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")
                .find("nested deeper than 64"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nested deeper"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ " + std::string(5000, '[') + "1" + std::string(5000, ']') + " }}")
                .find("nested deeper"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ " + std::string(5000, '[') + " }}").find("unterminated '{{'"),
            std::string::npos);
  // Steps count work, not just nodes: a loop copying long strings runs out sooner.
  EXPECT_NE(
      template_error_of(
          "{% set s = 'x' * 100000 %}{% for i in range(1000) %}{% set t = s ~ s %}{% endfor %}",
          ojson::object(), small)
          .find("steps"),
      std::string::npos);
  EXPECT_NE(
      template_error_of(std::string(3000, '-').insert(0, "{{ ") + "1 }}").find("nested deeper"),
      std::string::npos);
  EXPECT_NE(template_error_of("{{ 2 ** 100000000000 }}", ojson::object(), small).find("overflow"),
            std::string::npos);
  // No file or network access: there is nothing to call but the builtins.
  EXPECT_NE(template_error_of("{% include 'x' %}").find("unknown or misplaced statement 'include'"),
            std::string::npos);
  EXPECT_NE(template_error_of("{{ open('/etc/passwd') }}").find("'open' is undefined"),
            std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

TEST(ChatTemplate, ApplyChatTemplateAndTheDefaultTemplate) {
  const ojson messages = ojson::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
  const ChatTemplate def = ChatTemplate::parse(retnet::default_chat_template(), "default");
  EXPECT_EQ(retnet::apply_chat_template(def, messages, true, "<s>", "</s>"),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n");
  EXPECT_EQ(retnet::apply_chat_template(def, messages, false, "", ""), "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n");
  const ChatTemplate t = ChatTemplate::parse("{{ bos_token }}{{ messages | length }}{{ add_generation_prompt }}{{ eos_token }}{{ tools[0] }}", "t");
  // nlohmann::json (sorted keys) converts too.
  EXPECT_EQ(retnet::apply_chat_template(t, nlohmann::json::array({{{"role", "user"}}}), true, "<s>",
                                        "</s>", ojson{{"tools", {"calc"}}}),
            "<s>1True</s>calc");
  EXPECT_THROW(retnet::apply_chat_template(t, ojson::object(), true, "", ""), retnet::Error);
  EXPECT_EQ(t.origin(), "t");
}

}  // namespace
