#include "retnet/infer/grammar.h"

#include <algorithm>
#include <limits>

#include "retnet/core/error.h"

namespace retnet {
namespace {

bool contains(const Grammar::ByteSet& set, unsigned char c) {
  return (set[c >> 6] >> (c & 63)) & 1;
}

// Deeper chains of rule references than this mean a left-recursive grammar, which would never
// reach a byte.
constexpr int kMaxExpandDepth = 4096;

}  // namespace

int32_t Grammar::add_rule() {
  rules.emplace_back();
  return static_cast<int32_t>(rules.size() - 1);
}

int32_t Grammar::add_byte_set(const ByteSet& set) {
  auto it = std::find(byte_sets.begin(), byte_sets.end(), set);
  if (it != byte_sets.end()) return static_cast<int32_t>(it - byte_sets.begin());
  byte_sets.push_back(set);
  return static_cast<int32_t>(byte_sets.size() - 1);
}

Grammar::ByteSet Grammar::bytes_in(unsigned char lo, unsigned char hi) {
  ByteSet set{};
  for (int c = lo; c <= hi; ++c) set[c >> 6] |= uint64_t{1} << (c & 63);
  return set;
}

void Grammar::append_literal(Alternative& alt, const std::string& text) {
  for (unsigned char c : text) alt.push_back(set_element(byte(c)));
}

int32_t Grammar::left_recursive_rule() const {
  // Which rules can match no bytes at all (to a fixed point).
  std::vector<uint8_t> nullable(rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (nullable[r]) continue;
      for (const Alternative& alt : rules[r])
        if (std::all_of(alt.begin(), alt.end(), [&](const Element& e) {
              return e.is_rule && nullable[static_cast<size_t>(e.index)];
            })) {
          nullable[r] = changed = true;
          break;
        }
    }
  }
  // Rules entered before any byte, as edges; a cycle among them is left recursion.
  std::vector<std::vector<int32_t>> first(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (const Alternative& alt : rules[r])
      for (const Element& e : alt) {
        if (!e.is_rule) break;
        first[r].push_back(e.index);
        if (!nullable[static_cast<size_t>(e.index)]) break;
      }
  std::vector<uint8_t> mark(rules.size(), 0);  // 1: on the path, 2: done
  std::vector<std::pair<int32_t, size_t>> path;
  for (size_t start = 0; start < rules.size(); ++start) {
    if (mark[start]) continue;
    path.push_back({static_cast<int32_t>(start), 0});
    mark[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == first[static_cast<size_t>(r)].size()) {
        mark[static_cast<size_t>(r)] = 2;
        path.pop_back();
        continue;
      }
      const int32_t to = first[static_cast<size_t>(r)][next++];
      if (mark[static_cast<size_t>(to)] == 1) return to;
      if (mark[static_cast<size_t>(to)] == 0) {
        mark[static_cast<size_t>(to)] = 1;
        path.push_back({to, 0});
      }
    }
  }
  return -1;
}

void Grammar::check_no_left_recursion() const {
  const int32_t r = left_recursive_rule();
  RETNET_CHECK(r < 0, "the grammar is left-recursive: rule {} reaches itself before any byte", r);
}

GrammarRecognizer::GrammarRecognizer(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)) {
  const Grammar& g = *grammar_;
  RETNET_CHECK(g.root >= 0 && g.root < static_cast<int32_t>(g.rules.size()),
               "grammar root rule {} does not exist ({} rules)", g.root, g.rules.size());
  State start;
  size_t n = 0;
  const auto& alts = g.rules[static_cast<size_t>(g.root)];
  for (size_t a = 0; a < alts.size(); ++a) {
    const size_t j = n++;
    start.emplace_back();
    if (!alts[a].empty()) start[j].push_back({g.root, static_cast<int32_t>(a), 0});
    expand(start, n, j);
  }
  std::sort(start.begin(), start.end());
  start.erase(std::unique(start.begin(), start.end()), start.end());
  state_ = std::move(start);
}

namespace {

// The next free stack of `out` (a used one is reused for its memory).
size_t new_stack(GrammarRecognizer::State& out, size_t& n) {
  if (n == out.size()) out.emplace_back();
  return n++;
}

}  // namespace

// Positions always point at an element (a finished alternative is popped at once), so the top is
// either a byte set or a rule to enter; entering one replaces the top with where to return.
void GrammarRecognizer::expand(State& out, size_t& n, size_t i) const {
  for (int depth = 0;; ++depth) {
    if (out[i].empty()) return;
    RETNET_CHECK(depth < kMaxExpandDepth, "the grammar is left-recursive (rule {})",
                 out[i].back().rule);
    const Position top = out[i].back();
    const Grammar::Alternative& alt =
        grammar_->rules[static_cast<size_t>(top.rule)][static_cast<size_t>(top.alt)];
    const Grammar::Element e = alt[static_cast<size_t>(top.index)];
    if (!e.is_rule) return;
    out[i].pop_back();
    if (top.index + 1 < static_cast<int32_t>(alt.size()))
      out[i].push_back({top.rule, top.alt, top.index + 1});
    const auto& alts = grammar_->rules[static_cast<size_t>(e.index)];
    RETNET_CHECK(!alts.empty(), "grammar rule {} has no alternatives", e.index);
    // Every alternative but the last on a copy; the last goes on in this loop.
    for (size_t a = 0; a + 1 < alts.size(); ++a) {
      const size_t j = new_stack(out, n);
      out[j] = out[i];
      if (!alts[a].empty()) out[j].push_back({e.index, static_cast<int32_t>(a), 0});
      expand(out, n, j);
    }
    if (!alts.back().empty()) out[i].push_back({e.index, static_cast<int32_t>(alts.size() - 1), 0});
  }
}

void GrammarRecognizer::advance(const State& from, unsigned char byte, State& out) const {
  size_t n = 0;
  for (const Stack& stack : from) {
    if (stack.empty()) continue;
    const Position top = stack.back();
    const Grammar::Alternative& alt =
        grammar_->rules[static_cast<size_t>(top.rule)][static_cast<size_t>(top.alt)];
    const Grammar::Element e = alt[static_cast<size_t>(top.index)];
    if (!contains(grammar_->byte_sets[static_cast<size_t>(e.index)], byte)) continue;
    const size_t j = new_stack(out, n);
    out[j].assign(stack.begin(), stack.end());
    if (top.index + 1 < static_cast<int32_t>(alt.size()))
      out[j].back().index += 1;
    else
      out[j].pop_back();
    expand(out, n, j);
  }
  out.resize(n);
  if (n > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
}

GrammarRecognizer::State GrammarRecognizer::advance(const State& from, unsigned char byte) const {
  State out;
  advance(from, byte, out);
  return out;
}

bool GrammarRecognizer::accept_bytes(const std::string& bytes) {
  State s = state_;
  for (unsigned char c : bytes) {
    s = advance(s, c);
    if (s.empty()) return false;
  }
  state_ = std::move(s);
  return true;
}

// Sorted, the empty stack (a complete parse) comes first.
bool GrammarRecognizer::can_end() const { return !state_.empty() && state_.front().empty(); }
bool GrammarRecognizer::must_end() const { return state_.size() == 1 && state_.front().empty(); }

bool GrammarRecognizer::matches(const std::string& text) const {
  State s = state_;
  for (unsigned char c : text) {
    s = advance(s, c);
    if (s.empty()) return false;
  }
  return s.front().empty();
}

TokenTrie::TokenTrie(const Tokenizer& tokenizer) {
  const int64_t V = tokenizer.vocab_size();
  bytes_.resize(static_cast<size_t>(V));
  nodes_.emplace_back();
  for (int64_t t = 0; t < V; ++t) {
    const int32_t id = static_cast<int32_t>(t);
    // The end is the decoder's to allow; a token without bytes would not move a parse.
    if (id == tokenizer.eos_id() || id == tokenizer.bos_id()) continue;
    bytes_[static_cast<size_t>(t)] = tokenizer.token_bytes(id);
    const std::string& bytes = bytes_[static_cast<size_t>(t)];
    if (bytes.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : bytes) {
      auto& children = nodes_[static_cast<size_t>(node)].children;
      auto it =
          std::lower_bound(children.begin(), children.end(), c,
                           [](const auto& child, unsigned char b) { return child.first < b; });
      if (it != children.end() && it->first == c) {
        node = it->second;
        continue;
      }
      const int32_t next = static_cast<int32_t>(nodes_.size());
      children.insert(it, {c, next});
      nodes_.emplace_back();
      node = next;
    }
    nodes_[static_cast<size_t>(node)].tokens.push_back(id);
    max_bytes_ = std::max(max_bytes_, bytes.size());
  }
}

namespace {

// The interned states' limits (per sequence): a move table costs 1 KiB per state and an allowed
// set vocab / 8 bytes. Past them, what was memoized is forgotten; a walk that meets more states
// than kMaxStates is redone without memoizing.
constexpr size_t kMaxStates = 1024;
constexpr size_t kMaxMasks = 32;
constexpr int32_t kUnknown = -2;

}  // namespace

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar,
                                     std::shared_ptr<const TokenTrie> trie, bool memoize)
    : recognizer_(std::move(grammar)),
      trie_(std::move(trie)),
      memoize_(memoize),
      after_(trie_->max_bytes() + 1) {}

// after_[depth] holds the state after the trie path's bytes so far (sized once: no allocation
// once its stacks have grown).
void GrammarConstraint::walk(int32_t node, size_t depth, const State& state) {
  State& next = after_[depth];
  for (const auto& [byte, child] : trie_->nodes()[static_cast<size_t>(node)].children) {
    recognizer_.advance(state, byte, next);
    if (next.empty()) continue;
    const TokenTrie::Node& c = trie_->nodes()[static_cast<size_t>(child)];
    for (int32_t t : c.tokens)
      allowed_[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (static_cast<size_t>(t) & 63);
    if (!c.children.empty()) walk(child, depth + 1, next);
  }
}

int32_t GrammarConstraint::intern(const State& state) {
  const auto [it, added] = ids_.try_emplace(state, static_cast<int32_t>(states_.size()));
  if (added) {
    states_.push_back(&it->first);
    next_.emplace_back().fill(kUnknown);
    mask_of_.push_back(-1);
  }
  return it->second;
}

int32_t GrammarConstraint::next_state(int32_t state, unsigned char byte) {
  const int32_t known = next_[static_cast<size_t>(state)][byte];
  if (known != kUnknown) return known;
  recognizer_.advance(*states_[static_cast<size_t>(state)], byte, scratch_);
  if (!scratch_.empty() && states_.size() >= kMaxStates && !ids_.count(scratch_)) {
    overflow_ = true;
    return -1;
  }
  const int32_t next = scratch_.empty() ? -1 : intern(scratch_);
  next_[static_cast<size_t>(state)][byte] = next;  // indexed again: intern may have grown next_
  return next;
}

void GrammarConstraint::walk_interned(int32_t node, int32_t state) {
  for (const auto& [byte, child] : trie_->nodes()[static_cast<size_t>(node)].children) {
    const int32_t next = next_state(state, byte);
    if (next < 0) continue;
    const TokenTrie::Node& c = trie_->nodes()[static_cast<size_t>(child)];
    for (int32_t t : c.tokens)
      allowed_[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (static_cast<size_t>(t) & 63);
    if (!c.children.empty()) walk_interned(child, next);
  }
}

void GrammarConstraint::mask(float* logits, int64_t vocab) {
  const size_t words = (static_cast<size_t>(trie_->vocab()) + 63) / 64;
  if (!memoize_) {
    allowed_.assign(words, 0);
    walk(0, 0, recognizer_.state());
    ++walks_;
    return apply(allowed_, logits, vocab);
  }
  if (states_.size() >= kMaxStates) {
    ids_.clear();
    states_.clear();
    next_.clear();
    mask_of_.clear();
    masks_.clear();
  }
  if (masks_.size() >= kMaxMasks) {
    masks_.clear();
    std::fill(mask_of_.begin(), mask_of_.end(), -1);
  }
  const int32_t state = intern(recognizer_.state());
  if (mask_of_[static_cast<size_t>(state)] < 0) {
    allowed_.assign(words, 0);
    overflow_ = false;
    walk_interned(0, state);
    ++walks_;
    if (overflow_) {  // the set misses what lay past the limit: walk afresh, keep nothing
      allowed_.assign(words, 0);
      walk(0, 0, recognizer_.state());
      return apply(allowed_, logits, vocab);
    }
    mask_of_[static_cast<size_t>(state)] = static_cast<int32_t>(masks_.size());
    masks_.push_back(allowed_);
  }
  apply(masks_[static_cast<size_t>(mask_of_[static_cast<size_t>(state)])], logits, vocab);
}

void GrammarConstraint::apply(const std::vector<uint64_t>& allowed, float* logits,
                              int64_t vocab) const {
  const float ban = -std::numeric_limits<float>::infinity();
  const int64_t known = std::min(vocab, trie_->vocab());
  for (int64_t w = 0; w * 64 < known; ++w) {
    const uint64_t bits = allowed[static_cast<size_t>(w)];
    if (bits == ~uint64_t{0}) continue;
    const int64_t end = std::min(known, (w + 1) * 64);
    for (int64_t t = w * 64; t < end; ++t)
      if (!((bits >> (t & 63)) & 1)) logits[t] = ban;
  }
  for (int64_t t = known; t < vocab; ++t) logits[t] = ban;
}

void GrammarConstraint::accept(int32_t token) {
  RETNET_CHECK(token >= 0 && token < trie_->vocab(), "token {} is outside the vocabulary ({})",
               token, trie_->vocab());
  const std::string& bytes = trie_->bytes(token);
  RETNET_CHECK(!bytes.empty() && recognizer_.accept_bytes(bytes),
               "token {} does not continue the output's grammar", token);
}

}  // namespace retnet
