#pragma once
// tokenizer.json's "Sequence" components (pre-tokenizers, decoders, post-processors): a list of
// components of the same kind under one member.
#include <string>

#include "json_ctx.h"

namespace retnet::hf {

// Calls each(item, item_key) for every entry of j[list_name], which must be an array, in order;
// item_key names the entry in errors ("<key>.<list_name>[i]").
template <typename Each>
void for_each_in_sequence(const Ctx& c, const json& j, const std::string& key,
                          const std::string& list_name, Each each) {
  const json& list = c.member(j, key, list_name);
  if (!list.is_array()) c.fail(key + "." + list_name, "expected an array");
  for (size_t i = 0; i < list.size(); ++i)
    each(list[i], fmt::format("{}.{}[{}]", key, list_name, i));
}

}  // namespace retnet::hf
