// GBNF grammars as text (retnet/infer/gbnf.h): the subset's constructs accept and refuse the right
// texts, bad grammars are errors naming their line and column, and no input (deep nesting, huge
// repetitions, random bytes) crashes or runs away.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "retnet/infer/gbnf.h"
#include "retnet/infer/grammar.h"

namespace retnet {
namespace {

bool accepts(const std::string& grammar, const std::string& text) {
  return GrammarRecognizer(parse_gbnf(grammar)).matches(text);
}

// "line:column: message" of the error, or "(accepted)".
std::string error_of(const std::string& grammar) {
  try {
    parse_gbnf(grammar);
  } catch (const GbnfError& e) {
    return fmt::format("{}:{}: {}", e.line, e.column, e.what());
  }
  return "(accepted)";
}

TEST(Gbnf, LiteralsAlternativesAndGroups) {
  const std::string g = R"(# a greeting
root ::= greeting ", " ("world" | "you") "!"   # trailing comment
greeting ::= "hello" | "hi")";
  for (const char* ok : {"hello, world!", "hi, you!"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"hello, world", "hey, you!", "hi,you!", ""})
    EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Gbnf, EscapesAreCodePoints) {
  const std::string g = R"(root ::= "a\n\t\"\\\x41\u00e9\U0001F600[]")";
  EXPECT_TRUE(accepts(g, "a\n\t\"\\A\xc3\xa9\xf0\x9f\x98\x80[]"));
  EXPECT_FALSE(accepts(g, "a\n\t\"\\A\xe9\xf0\x9f\x98\x80[]"));  // é as one byte is not UTF-8
}

TEST(Gbnf, ClassesMatchWholeUtf8Characters) {
  EXPECT_TRUE(accepts("root ::= [a-c0-9_]+", "ab_09c"));
  EXPECT_FALSE(accepts("root ::= [a-c0-9_]+", "abd"));
  const std::string not_quote = R"(root ::= [^"\\]*)";
  for (const char* ok : {"", "x", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\x7f\n"})
    EXPECT_TRUE(accepts(not_quote, ok)) << ok;
  for (const char* bad : {"\"", "\\", "\xc3", "\xed\xa0\x80", "\xc0\x80", "\xf4\x90\x80\x80"})
    EXPECT_FALSE(accepts(not_quote, bad)) << bad;
  const std::string greek = "root ::= [\xce\xb1-\xcf\x89]";  // [α-ω]
  EXPECT_TRUE(accepts(greek, "\xce\xb2"));
  EXPECT_FALSE(accepts(greek, "a"));
  EXPECT_FALSE(accepts(greek, "\xce\x91"));  // Α, outside the range
  EXPECT_TRUE(accepts("root ::= [\\u0800-\\U0010FFFF]", "\xe0\xa0\x80"));
  EXPECT_TRUE(accepts("root ::= [\\u0800-\\U0010FFFF]", "\xf4\x8f\xbf\xbf"));
  EXPECT_FALSE(accepts("root ::= [\\u0800-\\U0010FFFF]", "\xdf\xbf"));
  EXPECT_TRUE(accepts("root ::= . . .", "a\xc3\xa9\xf0\x9f\x98\x80"));
  EXPECT_TRUE(accepts("root ::= [-a]+", "-a-"));  // a leading '-' is itself
}

TEST(Gbnf, Repetitions) {
  const std::string g = R"(root ::= "a"? "b"+ "cd"* [x]{2} [y]{1,3} [z]{2,})";
  for (const char* ok : {"bxxyzz", "abbcdcdxxyyyzzzz", "bcdxxyyzz"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"xxyzz", "aabxxyzz", "bcxxyzz", "bxyzz", "bxxyyyyzz", "bxxyz"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
  EXPECT_TRUE(accepts("root ::= \"ab\"{0}", ""));
  EXPECT_TRUE(accepts("root ::= \"ab\"{,2}", "abab"));
  EXPECT_FALSE(accepts("root ::= \"ab\"{,2}", "ababab"));
}

TEST(Gbnf, RulesSpanLinesAndRecurseOnTheRight) {
  const std::string g = R"(root ::=
  list
list ::= "[" (
    item ("," item)*
  )? "]"
item ::= [0-9]+
       | list
)";
  for (const char* ok : {"[]", "[1,22,[3,[]]]"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"[", "[1,]", "[[]"}) EXPECT_FALSE(accepts(g, bad)) << bad;
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("root ::= a\n"),
            "1:10: grammar line 1, column 10: rule 'a' is used but "
            "not defined");
  EXPECT_EQ(error_of("root ::= \"a\"\nb = \"x\""),
            "2:3: grammar line 2, column 3: expected '::=' after 'b'");
  EXPECT_EQ(error_of("a ::= \"x\""),
            "1:10: grammar line 1, column 10: the grammar has no 'root' rule (where the output "
            "starts)");
  EXPECT_NE(error_of("root ::= \"abc").find("1:14: "), std::string::npos)
      << error_of("root ::= \"abc");
  EXPECT_NE(error_of("root ::= \"\\q\"").find("1:11: "), std::string::npos);
  EXPECT_NE(error_of("root ::= [b-a]").find("backwards"), std::string::npos);
  EXPECT_NE(error_of("root ::= [^\\x00-\\U0010FFFF]").find("no character"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"a\"").find("')'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" )").find("1:14: "), std::string::npos);
  EXPECT_NE(error_of("root ::= *").find("unexpected '*'"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{3,2}").find("max < min"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{5000}").find("above 1024"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"\nroot ::= \"b\"").find("2:1: "), std::string::npos);
  EXPECT_NE(error_of("root ::= \"\xff\"").find("UTF-8"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\" b ::= \"x\"").find("line of the rule before"),
            std::string::npos);
  // Left recursion names the rule and where it is defined.
  EXPECT_EQ(error_of("root ::= \"x\"\nexpr ::= expr \"+\" [0-9] | [0-9]\nroot2 ::= expr"),
            "2:1: grammar line 2, column 1: rule 'expr' is left-recursive: it reaches itself "
            "before any character (write the repetition as x* or a right-recursive rule)");
  EXPECT_NE(error_of("root ::= (\"\")*").find("left-recursive"), std::string::npos);
}

TEST(Gbnf, BoundsKeepHostileGrammarsSmall) {
  // Nesting past the limit is an error, not a stack overflow.
  const std::string deep =
      "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_NE(error_of(deep).find("nest deeper than 64"), std::string::npos);
  EXPECT_TRUE(accepts("root ::= " + std::string(60, '(') + "\"a\"" + std::string(60, ')'), "a"));
  // Repetitions of repetitions reference a rule instead of copying it; the total is bounded.
  EXPECT_NO_THROW(parse_gbnf("root ::= ((\"ab\"{1024}){1024}){1024}"));
  std::string wide = "root ::= x\n";
  for (int i = 0; i < 1100; ++i) wide += fmt::format("x{} ::= [a]{{1024}}\n", i);
  wide += "x ::= x0\n";
  EXPECT_NE(error_of(wide).find("too large"), std::string::npos);
}

TEST(Gbnf, RandomTextIsAGrammarOrAnError) {
  // Fuzz-like: text from the grammar's own alphabet; anything but a GbnfError is a failure.
  const std::string alphabet = "root ::= \"ab\\x[]^-|()*+?{},.#\n\t0123456789az_";
  std::mt19937 rng(7);
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = i % 2 ? "root ::= " : "";
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    try {
      const auto g = parse_gbnf(text);
      GrammarRecognizer(g).matches("ab");
      ++parsed;
    } catch (const GbnfError&) {
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace retnet
