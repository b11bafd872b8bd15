// tokenizer.json's "model" (BPE), "added_tokens" and "post_processor" sections.
#include "json_ctx.h"
#include "json_sequence.h"

namespace retnet::hf {
namespace {

std::vector<std::pair<std::string, std::string>> parse_merges(const Ctx& c, const json& model) {
  const json& merges = c.member(model, "model", "merges");
  if (!merges.is_array()) c.fail("model.merges", "expected an array");
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string key = fmt::format("model.merges[{}]", i);
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        c.fail(key, fmt::format("'{}' is not two tokens separated by one space", s));
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      c.fail(key, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return out;
}

void reject_set(const Ctx& c, const json& model, const char* name) {
  auto it = model.find(name);
  if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
    c.fail(fmt::format("model.{}", name), "is not supported (BPE without subword affixes only)");
}

// Records `content` under `id`; the caller has checked that id is within the file's entries.
// Returns the token already there ("" when none).
std::string remember_token(Config& config, int32_t id, const std::string& content) {
  if (id >= static_cast<int32_t>(config.id_to_token.size())) config.id_to_token.resize(id + 1);
  std::string before = std::move(config.id_to_token[id]);
  config.id_to_token[id] = content;
  return before;
}

// Ids index a table with a slot for every id up to the largest: real files are dense or nearly,
// so ids past twice the entries (and a margin) are refused rather than allocated.
int64_t id_bound(const json& root) {
  const json& model = root.at("model");
  const auto vocab = model.find("vocab");
  const auto added = root.find("added_tokens");
  const auto entries =
      static_cast<int64_t>((vocab != model.end() ? vocab->size() : 0) +
                           (added != root.end() && added->is_array() ? added->size() : 0));
  return 2 * entries + 65536;
}

std::string id_limit_text(int64_t bound) {
  return fmt::format(
      "ids may not exceed {} (twice the entries of model.vocab and added_tokens, plus 65536)",
      bound - 1);
}

int32_t find_token(const Config& config, const std::string& content) {
  for (const auto& a : config.added)
    if (a.content == content) return a.id;
  auto it = config.bpe->vocab().find(content);
  return it == config.bpe->vocab().end() ? -1 : it->second;
}

// TemplateProcessing's "single" template: whether it starts with a special token, and its id.
void parse_post_processor(const Ctx& c, const json& j, const std::string& key, Config& config,
                          int depth = 0) {
  if (j.is_null()) return;
  const std::string type = c.type(j, key);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    if (depth > 16) c.fail(key, "Sequences nested deeper than 16 levels");
    for_each_in_sequence(c, j, key, "processors",
                         [&](const json& item, const std::string& item_key) {
                           parse_post_processor(c, item, item_key, config, depth + 1);
                         });
    return;
  }
  if (type != "TemplateProcessing")
    c.fail(key, fmt::format("post-processor type '{}' is not supported (supported: "
                            "TemplateProcessing, ByteLevel, Sequence)",
                            type));
  const json& single = c.member(j, key, "single");
  if (!single.is_array()) c.fail(key + ".single", "expected an array");
  if (single.empty() || !single[0].is_object() || !single[0].contains("SpecialToken")) return;
  const json& special = single[0]["SpecialToken"];
  const std::string name = c.str(special, key + ".single[0].SpecialToken", "id");
  int32_t id = find_token(config, name);
  auto tokens = j.find("special_tokens");
  if (tokens != j.end() && tokens->is_object() && tokens->contains(name)) {
    const json& entry = (*tokens)[name];
    if (!entry.is_object()) c.fail(key + ".special_tokens." + name, "expected an object");
    const json& ids = entry.value("ids", json::array());
    if (ids.is_array() && !ids.empty())
      id = static_cast<int32_t>(c.integer(ids[0], key + ".special_tokens." + name + ".ids[0]"));
  }
  if (id < 0)
    c.fail(key + ".single[0]", fmt::format("the token '{}' is not in the vocabulary", name));
  config.bos_id = id;
  config.adds_bos = true;
}

}  // namespace

void parse_model(const Ctx& c, const json& root, Config& config) {
  const json& model = c.member(root, "(top level)", "model");
  if (!model.is_object()) c.fail("model", "expected an object");
  const std::string type = c.str(model, "model", "type", model.contains("merges") ? "BPE" : "");
  if (type != "BPE")
    c.fail("model.type", fmt::format("model type '{}' is not supported (BPE only)", type));
  const json& vocab = c.member(model, "model", "vocab");
  if (!vocab.is_object()) c.fail("model.vocab", "expected an object of token: id");
  if (vocab.empty()) c.fail("model.vocab", "empty: a tokenizer needs at least one token");
  const int64_t bound = id_bound(root);
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    const int64_t v = c.integer(id, "model.vocab." + token);
    if (v < 0 || v >= bound)
      c.fail("model.vocab." + token,
             fmt::format("id {} is out of range: {}", v, id_limit_text(bound)));
    ids.emplace(token, static_cast<int32_t>(v));
    const std::string before = remember_token(config, static_cast<int32_t>(v), token);
    if (!before.empty())
      c.fail("model.vocab." + token, fmt::format("id {} is also the id of '{}'", v, before));
  }
  const auto merges = parse_merges(c, model);
  const json& dropout = model.value("dropout", json());
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0))
    c.fail("model.dropout", "BPE dropout is not supported");
  reject_set(c, model, "continuing_subword_prefix");
  reject_set(c, model, "end_of_word_suffix");
  Bpe::Options o;
  o.byte_fallback = c.flag(model, "model", "byte_fallback", false);
  o.ignore_merges = c.flag(model, "model", "ignore_merges", false);
  o.fuse_unk = c.flag(model, "model", "fuse_unk", false);
  const std::string unk = c.str(model, "model", "unk_token", "");
  if (!unk.empty()) {
    auto it = ids.find(unk);
    if (it == ids.end()) c.fail("model.unk_token", fmt::format("'{}' is not in model.vocab", unk));
    o.unk_id = it->second;
  }
  try {
    config.bpe = std::make_unique<Bpe>(std::move(ids), merges, o);
  } catch (const std::string& what) {
    c.fail("model.merges", what);
  }
}

void parse_added_and_post(const Ctx& c, const json& root, Config& config) {
  const json& added = root.value("added_tokens", json::array());
  if (!added.is_array()) c.fail("added_tokens", "expected an array");
  const int64_t bound = id_bound(root);
  const size_t vocab_ids = config.id_to_token.size();
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string key = fmt::format("added_tokens[{}]", i);
    const json& t = added[i];
    AddedToken a;
    a.content = c.str(t, key, "content");
    const int64_t id = c.integer(c.member(t, key, "id"), key + ".id");
    if (id < 0 || id >= bound)
      c.fail(key + ".id", fmt::format("id {} of '{}' is out of range: {}", id,
                                      c.str(t, key, "content"), id_limit_text(bound)));
    a.id = static_cast<int32_t>(id);
    a.special = c.flag(t, key, "special", false);
    a.lstrip = c.flag(t, key, "lstrip", false);
    a.rstrip = c.flag(t, key, "rstrip", false);
    a.normalized = c.flag(t, key, "normalized", !a.special);
    if (c.flag(t, key, "single_word", false))
      c.fail(key + ".single_word", "single_word added tokens are not supported");
    if (a.content.empty()) c.fail(key + ".content", "empty");
    // An added token may restate a vocabulary entry (same id, same text), never take another's id.
    const std::string before = remember_token(config, a.id, a.content);
    if (!before.empty() && before != a.content)
      c.fail(key + ".id",
             fmt::format("id {} of '{}' is also the id of '{}'", a.id, a.content, before));
    if (!before.empty() && static_cast<size_t>(a.id) >= vocab_ids)
      c.fail(key + ".id", fmt::format("'{}' is listed twice with id {}", a.content, a.id));
    config.added.push_back(std::move(a));
  }
  parse_post_processor(c, root.value("post_processor", json()), "post_processor", config);
  if (config.bos_id < 0)
    for (const char* name : {"<s>", "<|begin_of_text|>", "<|startoftext|>"})
      if ((config.bos_id = find_token(config, name)) >= 0) break;
  for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
    if ((config.eos_id = find_token(config, name)) >= 0) break;
}

}  // namespace retnet::hf
