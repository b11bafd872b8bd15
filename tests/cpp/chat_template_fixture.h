#pragma once
// Rendering a chat template source in one call, for the template tests; the template is named
// "test.jinja" in its errors.
#include <nlohmann/json.hpp>
#include <string>

#include "retnet/core/error.h"
#include "retnet/text/chat_template.h"

namespace retnet::test {

inline std::string render(const std::string& source,
                          const nlohmann::ordered_json& vars = nlohmann::ordered_json::object(),
                          const ChatTemplateLimits& limits = {}) {
  return ChatTemplate::parse(source, "test.jinja", limits).render(vars);
}

// The Error a template raises (when parsing or rendering); "" when there is none.
inline std::string template_error_of(
    const std::string& source, const nlohmann::ordered_json& vars = nlohmann::ordered_json::object(),
    const ChatTemplateLimits& limits = {}) {
  try {
    render(source, vars, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace retnet::test
