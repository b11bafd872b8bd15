#pragma once
// Byte-level context-free grammars and the token constraint they give (retnet/infer/decoder.h):
// a grammar's rules are alternatives of byte sets and rule references; a recognizer keeps every
// parse that is still possible (a set of stacks, as llama.cpp's grammar sampler does), so a
// token spanning several grammar symbols (byte-level BPE) is checked byte by byte. The mask walks
// a trie of the vocabulary's bytes once per step, so tokens sharing a prefix share the work.
// Grammars here come from code (the JSON schema compiler): no left recursion.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "retnet/infer/decoder.h"
#include "retnet/text/tokenizer.h"

namespace retnet {

struct Grammar {
  // An element is a set of bytes (one byte of input) or a reference to a rule.
  struct Element {
    bool is_rule = false;
    int32_t index = 0;  // into byte_sets or rules
  };
  using Alternative = std::vector<Element>;
  using ByteSet = std::array<uint64_t, 4>;
  std::vector<std::vector<Alternative>> rules;
  std::vector<ByteSet> byte_sets;
  int32_t root = 0;

  // Building: a new empty rule; a byte set (sorted, deduplicated); the element for a literal.
  int32_t add_rule();
  int32_t add_byte_set(const ByteSet& set);
  static ByteSet bytes_in(unsigned char lo, unsigned char hi);
  static ByteSet byte(unsigned char c) { return bytes_in(c, c); }
  Element set_element(const ByteSet& set) { return {false, add_byte_set(set)}; }
  static Element rule_element(int32_t rule) { return {true, rule}; }
  // Appends the elements matching `text` byte by byte to `alt`.
  void append_literal(Alternative& alt, const std::string& text);
  // Error naming a rule that can reach itself before any byte (left recursion), which a
  // recognizer could never get past.
  void check_no_left_recursion() const;
  // A rule on such a cycle, or -1 when there is none.
  int32_t left_recursive_rule() const;
};

// Where parses stand: each stack's top is the byte set to match next; an empty stack is a parse
// that is complete.
class GrammarRecognizer {
 public:
  explicit GrammarRecognizer(std::shared_ptr<const Grammar> grammar);
  struct Position {
    int32_t rule, alt, index;
    auto operator<=>(const Position&) const = default;
  };
  using Stack = std::vector<Position>;
  using State = std::vector<Stack>;  // sorted, no duplicates; empty: nothing can follow

  const State& state() const { return state_; }
  void set_state(State s) { state_ = std::move(s); }
  // The parses after `byte` from `from` (empty when the byte fits none).
  State advance(const State& from, unsigned char byte) const;
  // The same into `out` (not `from`), reusing its stacks' memory: the mask's inner loop.
  void advance(const State& from, unsigned char byte, State& out) const;
  // Moves over `bytes`; false (state unchanged) when they do not fit.
  bool accept_bytes(const std::string& bytes);
  bool can_end() const;   // some parse is complete
  bool must_end() const;  // every parse is complete
  // Whether `text` is a whole sentence of the grammar.
  bool matches(const std::string& text) const;

 private:
  // Expands out[i] until its top is a byte set (or it is empty); the alternatives it forks go to
  // new stacks at out[n], out[n + 1], ...
  void expand(State& out, size_t& n, size_t i) const;
  std::shared_ptr<const Grammar> grammar_;
  State state_;
};

// The vocabulary's token bytes as a trie (built once per tokenizer, shared by every sequence).
class TokenTrie {
 public:
  explicit TokenTrie(const Tokenizer& tokenizer);
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    std::vector<int32_t> tokens;                              // tokens whose bytes end here
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes_[0] is the root
  const std::string& bytes(int32_t token) const { return bytes_[static_cast<size_t>(token)]; }
  int64_t vocab() const { return static_cast<int64_t>(bytes_.size()); }
  size_t max_bytes() const { return max_bytes_; }  // the longest token

 private:
  std::vector<Node> nodes_;
  std::vector<std::string> bytes_;
  size_t max_bytes_ = 0;
};

// A grammar as a decode constraint: the tokens whose bytes continue some parse. The walk of the
// trie moves between recognizer states; they are interned with their moves by byte, so a state
// reached again (inside a JSON string nearly every byte leads back to the same one) costs a table
// look-up instead of an advance, and the allowed set of a state masked before is reused (the set
// depends on the state alone). Both are bounded: past the limits they are forgotten and rebuilt.
class GrammarConstraint : public TokenConstraint {
 public:
  // `memoize` false: every mask walks the trie advancing the states afresh (the reference that
  // the memoized masks are tested and measured against).
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                    bool memoize = true);
  void mask(float* logits, int64_t vocab) override;
  void accept(int32_t token) override;
  bool can_end() const override { return recognizer_.can_end(); }
  bool must_end() const override { return recognizer_.must_end(); }
  // Masks that walked the trie (the others reused their state's allowed set).
  int64_t walks() const { return walks_; }

 private:
  using State = GrammarRecognizer::State;
  void walk(int32_t node, size_t depth, const State& state);  // without memoizing
  void walk_interned(int32_t node, int32_t state);
  int32_t intern(const State& state);
  // An interned id, or -1: no parse (or more states than the limit: sets overflow_).
  int32_t next_state(int32_t state, unsigned char byte);
  void apply(const std::vector<uint64_t>& allowed, float* logits, int64_t vocab) const;

  GrammarRecognizer recognizer_;
  std::shared_ptr<const TokenTrie> trie_;
  bool memoize_ = true;
  std::vector<uint64_t> allowed_;  // a bit per token, filled by a walk (sized once)
  std::vector<State> after_;       // walk's state after each depth of the trie
  // Interned states: ids_ maps a state to its index in states_ (pointers to ids_'s keys, which
  // stay put), next_ its moves by byte (kUnknown until computed), mask_of_ its allowed set's
  // index in masks_ (-1: not masked yet).
  std::map<State, int32_t> ids_;
  std::vector<const State*> states_;
  std::vector<std::array<int32_t, 256>> next_;
  std::vector<int32_t> mask_of_;
  std::vector<std::vector<uint64_t>> masks_;
  State scratch_;
  bool overflow_ = false;  // a walk met more states than the limit: its set is not used
  int64_t walks_ = 0;
};

}  // namespace retnet
