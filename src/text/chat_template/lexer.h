#pragma once
// Splits a template into text and the tokens inside {{ }}, {% %} (comments {# #} are dropped),
// applying whitespace control the way transformers configures Jinja: "-" on a tag strips the
// whitespace beside it, trim_blocks drops the newline after a block or comment tag, lstrip_blocks
// drops the spaces and tabs before one at the start of a line ("+" turns either off for a tag),
// and one trailing newline of the source is dropped.
#include <string>
#include <vector>

namespace retnet::chat_template_detail {

struct Token {
  enum class Type { Text, ExprBegin, ExprEnd, StmtBegin, StmtEnd, Name, String, Int, Float, Op, End };
  Type type;
  std::string text;  // the text, name, operator or the string literal's value
  int line = 1, column = 1;
};

// Throws Error "origin:line:column: ..." on an unterminated tag, string or comment or an
// unknown character.
std::vector<Token> tokenize(const std::string& source, const std::string& origin);

}  // namespace retnet::chat_template_detail
