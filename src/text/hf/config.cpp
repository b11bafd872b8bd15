// tokenizer.json -> Config, with an Error naming the file and the key for anything unsupported.
#include "config.h"

#include <algorithm>

#include "json_ctx.h"
#include "json_sequence.h"
#include "retnet/core/json_parse.h"

namespace retnet::hf {
namespace {

// Sequences inside Sequences: real files nest two deep; the builders recurse once per level.
constexpr int kMaxSequenceDepth = 16;
// Steps of one section once Sequences are flattened: the encoder recurses once per step.
constexpr size_t kMaxSteps = 64;
// How many times the steps of one section may multiply a text's length (each ByteLevel doubles
// it at most, so a Sequence of many ByteLevels would otherwise grow every input exponentially).
constexpr double kMaxGrowth = 1024;

void check_sequence_depth(const Ctx& c, const std::string& key, int depth) {
  if (depth > kMaxSequenceDepth)
    c.fail(key, fmt::format("Sequences nested deeper than {} levels", kMaxSequenceDepth));
}

template <typename Step>
void add_step(const Ctx& c, const std::string& key, std::vector<Step>& out, Step step) {
  if (out.size() >= kMaxSteps)
    c.fail(key, fmt::format("more than {} steps in this section (Sequences flattened)", kMaxSteps));
  out.push_back(std::move(step));
}

void parse_normalizer(const Ctx& c, const json& j, const std::string& key,
                      std::vector<NormalizerStep>& out, int depth = 0) {
  if (j.is_null()) return;
  const std::string type = c.type(j, key);
  if (type == "Sequence") {
    check_sequence_depth(c, key, depth);
    const json& list = c.member(j, key, "normalizers");
    if (!list.is_array()) c.fail(key + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(c, list[i], fmt::format("{}.normalizers[{}]", key, i), out, depth + 1);
  } else if (type == "Prepend") {
    add_step(c, key, out, NormalizerStep{NormalizerStep::kPrepend, c.str(j, key, "prepend"), ""});
  } else if (type == "Replace") {
    add_step(c, key, out,
             NormalizerStep{NormalizerStep::kReplace, c.pattern(j, key), c.str(j, key, "content")});
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const auto form = type == "NFC"    ? NormalizerStep::kNfc
                      : type == "NFD"  ? NormalizerStep::kNfd
                      : type == "NFKC" ? NormalizerStep::kNfkc
                                       : NormalizerStep::kNfkd;
    add_step(c, key, out, NormalizerStep{form, "", ""});
  } else {
    c.fail(key, fmt::format("normalizer type '{}' is not supported (supported: Sequence, "
                            "Prepend, Replace, NFC, NFD, NFKC, NFKD)",
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
                         std::vector<PreTokenizerStep>& out, int depth = 0) {
  if (j.is_null()) return;
  const std::string type = c.type(j, key);
  PreTokenizerStep s{};
  if (type == "Sequence") {
    check_sequence_depth(c, key, depth);
    for_each_in_sequence(c, j, key, "pretokenizers",
                         [&](const json& item, const std::string& item_key) {
                           parse_pre_tokenizer(c, item, item_key, out, depth + 1);
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
  add_step(c, key, out, std::move(s));
}

void parse_decoder(const Ctx& c, const json& j, const std::string& key,
                   std::vector<DecoderStep>& out, int depth = 0) {
  if (j.is_null()) return;
  const std::string type = c.type(j, key);
  DecoderStep s{};
  if (type == "Sequence") {
    check_sequence_depth(c, key, depth);
    for_each_in_sequence(c, j, key, "decoders", [&](const json& item, const std::string& item_key) {
      parse_decoder(c, item, item_key, out, depth + 1);
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
  add_step(c, key, out, std::move(s));
}

// The most a normalizer's or decoder's steps can multiply a text's length by: only their Replace
// steps can lengthen it (a normalizer's Prepend adds once).
template <typename Step>
double replace_growth(const std::vector<Step>& steps) {
  double g = 1;
  for (const auto& s : steps)
    if (s.kind == Step::kReplace && !s.text.empty())
      g *=
          std::max(1.0, static_cast<double>(s.content.size()) / static_cast<double>(s.text.size()));
  return g;
}

// The normalizer's: its Replace steps', times the most one Unicode normalization multiplies a
// text's code points by (UAX #15: 4 for NFD, 18 for NFKC and NFKD; a second form adds nothing,
// as each form's output is already decomposed or composed as far as any form takes it).
double normalizer_growth(const std::vector<NormalizerStep>& steps) {
  double unicode = 1;
  for (const auto& s : steps)
    if (s.kind != NormalizerStep::kPrepend && s.kind != NormalizerStep::kReplace)
      unicode = std::max(
          unicode, s.kind == NormalizerStep::kNfc || s.kind == NormalizerStep::kNfd ? 4.0 : 18.0);
  return replace_growth(steps) * unicode;
}

// The same for the pre-tokenizer, per word of one byte: a ByteLevel step maps a byte to up to two
// (three with its prefix space), a Metaspace step a space to its replacement and may prepend one.
double pre_tokenizer_growth(const std::vector<PreTokenizerStep>& steps) {
  double g = 1;
  for (const auto& s : steps) {
    if (s.kind == PreTokenizerStep::kByteLevel) g *= s.add_prefix_space ? 4 : 2;
    if (s.kind == PreTokenizerStep::kMetaspace)
      g *= 2 * std::max<double>(1, static_cast<double>(s.replacement.size()));
  }
  return g;
}

void check_growth(const Ctx& c, const char* key, double growth) {
  if (growth > kMaxGrowth)
    c.fail(key, fmt::format("its steps can make a text over {} times longer (repeated ByteLevel, "
                            "Metaspace or growing Replace steps); at most {} is supported",
                            kMaxGrowth, kMaxGrowth));
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
  // Hugging Face cuts and pads each encoded text by these; the engine encodes whole texts (prompts,
  // training corpora) and never cuts or pads one, so a file that asks for either is refused.
  for (const char* key : {"truncation", "padding"}) {
    const json& value = root.value(key, json());
    if (value.is_null()) continue;
    std::string shown = value.dump();
    if (shown.size() > 200) shown = shown.substr(0, 200) + "...";
    c.fail(key,
           fmt::format("is {}; this engine never {} a text, so it is not applied: set "
                       "\"{}\" to null (transformers: tokenizer.backend_tokenizer.no_{}())",
                       shown, key == std::string("truncation") ? "truncates" : "pads", key, key));
  }
  parse_normalizer(c, root.value("normalizer", json()), "normalizer", config.normalizer);
  parse_pre_tokenizer(c, root.value("pre_tokenizer", json()), "pre_tokenizer",
                      config.pre_tokenizer);
  parse_decoder(c, root.value("decoder", json()), "decoder", config.decoder);
  check_growth(c, "normalizer", normalizer_growth(config.normalizer));
  check_growth(c, "pre_tokenizer", pre_tokenizer_growth(config.pre_tokenizer));
  check_growth(c, "decoder", replace_growth(config.decoder));
  parse_model(c, root, config);
  parse_added_and_post(c, root, config);
}

}  // namespace retnet::hf
