#pragma once
// Structured output: JSON as a byte-level grammar (retnet/infer/grammar.h), either any JSON
// object or the values a JSON Schema allows, from this subset of its keywords:
//   type (object, array, string, number, integer, boolean, null, or a list of them), properties,
//   required, additionalProperties (false, or absent: only the listed properties are written),
//   enum, const, items, minItems, maxItems, minLength, maxLength, anyOf, $ref to "#", "#/$defs/.."
//   or "#/definitions/..", and the annotations title, description, default, examples, $comment,
//   $schema, $id.
// Any other keyword is refused by name. The output is compact-ish JSON: properties in the
// schema's order, at most 8 whitespace bytes between tokens, numbers of at most 16 digits before
// and after the point and 3 in the exponent; it ends with the value (no trailing whitespace).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "retnet/core/error.h"
#include "retnet/infer/grammar.h"

namespace retnet {

// A schema outside the subset: `path` names the keyword ("properties.age.minimum").
struct JsonSchemaError : Error {
  JsonSchemaError(std::string path, const std::string& message)
      : Error(message), path(std::move(path)) {}
  std::string path;
};

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
std::shared_ptr<const Grammar> json_object_grammar();

// The values `schema` allows; JsonSchemaError for a keyword outside the subset, an impossible
// schema (false, an empty enum) or one too large (length and item bounds above 1024).
std::shared_ptr<const Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);

}  // namespace retnet
