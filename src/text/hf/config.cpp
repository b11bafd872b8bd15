// tokenizer.json -> Config, with an Error naming the file and the key for anything unsupported.
#include "config.h"

#include "json_ctx.h"
#include "json_sequence.h"

#include "retnet/core/json_parse.h"

namespace retnet::hf {
namespace {

void parse_normalizer(const Ctx& c, const json& j, const std::string& key,
                      std::vector<NormalizerStep>& out) {
  if (j.is_null()) return;
  const std::string type = c.type(j, key);
  if (type == "Sequence") {
    const json& list = c.member(j, key, "normalizers");
    if (!list.is_array()) c.fail(key + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(c, list[i], fmt::format("{}.normalizers[{}]", key, i), out);
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::kPrepend, c.str(j, key, "prepend"), ""});
  } else if (type == "Replace") {
    out.push_back({NormalizerStep::kReplace, c.pattern(j, key), c.str(j, key, "content")});
  } else if (type == "NFC" || type == "NFKC" || type == "NFD" || type == "NFKD") {
    c.fail(key, fmt::format("Unicode normalization {} is not supported (no composition tables "
                            "are built in); supported: Sequence, Prepend, Replace",
                            type));
  } else {
    c.fail(key, fmt::format("normalizer type '{}' is not supported (supported: Sequence, "
                            "Prepend, Replace)",
                            type));
  }
}

PreTokenizerStep::Prepend prepend_scheme(const Ctx& c, const json& j, const std::string& key) {
  const std::string s = c.str(j, key, "prepend_scheme", "always");
  if (s == "always") return PreTokenizerStep::kAlways;
  if (s == "first") return PreTokenizerStep::kFirst;
  if (s == "never") return PreTokenizerStep::kNever;
  c.fail(key + ".prepend_scheme", fmt::format("'{}' is not always, first or never", s));
}

void parse_split(const Ctx& c, const json& j, const std::string& key, PreTokenizerStep& s) {
  if (c.flag(j, key, "invert", false)) c.fail(key + ".invert", "inverted splits are not supported");
  const std::string behavior = c.str(j, key, "behavior", "Isolated");
  if (behavior != "Isolated" && behavior != "Removed")
    c.fail(key + ".behavior", fmt::format("'{}' is not supported (Isolated, Removed)", behavior));
  s.drop_matches = behavior == "Removed";
  std::string regex;
  s.literal = c.pattern(j, key, &regex);
  s.kind = PreTokenizerStep::kSplitString;
  if (!regex.empty()) {
    auto known = recognise_split_pattern(regex);
    if (!known)
      c.fail(key + ".pattern.Regex",
             fmt::format("the regex '{}' is not one this engine knows (the GPT-2 and Llama-3 "
                         "split patterns)",
                         regex));
    s.kind = PreTokenizerStep::kSplitRegex;
    s.pattern = *known;
  }
}

void parse_pre_tokenizer(const Ctx& c, const json& j, const std::string& key,
                         std::vector<PreTokenizerStep>& out) {
  if (j.is_null()) return;
  const std::string type = c.type(j, key);
  PreTokenizerStep s{};
  if (type == "Sequence") {
    for_each_in_sequence(c, j, key, "pretokenizers",
                         [&](const json& item, const std::string& item_key) {
                           parse_pre_tokenizer(c, item, item_key, out);
                         });
    return;
  } else if (type == "Metaspace") {
    s.kind = PreTokenizerStep::kMetaspace;
    s.replacement = c.str(j, key, "replacement", "\xE2\x96\x81");
    s.prepend = prepend_scheme(c, j, key);
    if (j.contains("add_prefix_space") && !j.contains("prepend_scheme") &&
        !c.flag(j, key, "add_prefix_space", true))
      s.prepend = PreTokenizerStep::kNever;
    s.split = c.flag(j, key, "split", true);
  } else if (type == "ByteLevel") {
    s.kind = PreTokenizerStep::kByteLevel;
    s.add_prefix_space = c.flag(j, key, "add_prefix_space", true);
    s.use_regex = c.flag(j, key, "use_regex", true);
  } else if (type == "Split") {
    parse_split(c, j, key, s);
  } else if (type == "Digits") {
    s.kind = PreTokenizerStep::kDigits;
    s.individual_digits = c.flag(j, key, "individual_digits", false);
  } else {
    c.fail(key, fmt::format("pre-tokenizer type '{}' is not supported (supported: Sequence, "
                            "Metaspace, ByteLevel, Split, Digits)",
                            type));
  }
  out.push_back(std::move(s));
}

void parse_decoder(const Ctx& c, const json& j, const std::string& key,
                   std::vector<DecoderStep>& out) {
  if (j.is_null()) return;
  const std::string type = c.type(j, key);
  DecoderStep s{};
  if (type == "Sequence") {
    for_each_in_sequence(c, j, key, "decoders", [&](const json& item, const std::string& item_key) {
      parse_decoder(c, item, item_key, out);
    });
    return;
  } else if (type == "Replace") {
    s = {DecoderStep::kReplace, c.pattern(j, key), c.str(j, key, "content")};
  } else if (type == "ByteFallback") {
    s.kind = DecoderStep::kByteFallback;
  } else if (type == "Fuse") {
    s.kind = DecoderStep::kFuse;
  } else if (type == "Strip") {
    s.kind = DecoderStep::kStrip;
    s.text = c.str(j, key, "content", " ");
    s.start = static_cast<int>(c.integer(j.value("start", json(0)), key + ".start"));
    s.stop = static_cast<int>(c.integer(j.value("stop", json(0)), key + ".stop"));
  } else if (type == "Metaspace") {
    s.kind = DecoderStep::kMetaspace;
    s.text = c.str(j, key, "replacement", "\xE2\x96\x81");
    s.strip_first = prepend_scheme(c, j, key) != PreTokenizerStep::kNever &&
                    c.flag(j, key, "add_prefix_space", true);
  } else if (type == "ByteLevel") {
    s.kind = DecoderStep::kByteLevel;
  } else {
    c.fail(key, fmt::format("decoder type '{}' is not supported (supported: Sequence, Replace, "
                            "ByteFallback, Fuse, Strip, Metaspace, ByteLevel)",
                            type));
  }
  out.push_back(std::move(s));
}

}  // namespace

void parse_all(const Ctx& c, const json& root, Config& config);

Config parse_config(const std::string& json_text, const std::string& origin) {
  const Ctx c{origin};
  const json root = parse_json(json_text, fmt::format("'{}'", origin));
  if (!root.is_object()) c.fail("(top level)", "expected an object");
  Config config;
  try {
    parse_all(c, root, config);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}': tokenizer.json has an unexpected shape: {}", origin, e.what()));
  }
  return config;
}

void parse_all(const Ctx& c, const json& root, Config& config) {
  parse_normalizer(c, root.value("normalizer", json()), "normalizer", config.normalizer);
  parse_pre_tokenizer(c, root.value("pre_tokenizer", json()), "pre_tokenizer",
                      config.pre_tokenizer);
  parse_decoder(c, root.value("decoder", json()), "decoder", config.decoder);
  parse_model(c, root, config);
  parse_added_and_post(c, root, config);
}

}  // namespace retnet::hf
