#pragma once
// Builds the statement tree of a template from its tokens (lexer.h). Syntax errors are Errors
// "chat template ORIGIN:LINE:COLUMN: ...".
#include <string>
#include <vector>

#include "ast.h"
#include "lexer.h"

namespace retnet::chat_template_detail {

Body parse_tokens(const std::vector<Token>& tokens, const std::string& origin);

}  // namespace retnet::chat_template_detail
