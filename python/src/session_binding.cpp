// retnet.Session: decoding sequences step by step, with zero-copy views of the logits and states.
#include <cstring>
#include <random>

#include "binding.h"

namespace retnet::python {
namespace {

// A Session and the model it reads. Calls release the GIL and lock `mutex`, so two Python
// threads using one session take turns instead of corrupting it.
struct PySession {
  PySession(std::shared_ptr<PyModel> m, const SessionOptions& options)
      : model(std::move(m)), session(model->model, options) {}
  std::shared_ptr<PyModel> model;
  Session session;
  std::mutex mutex;

  void check_sequence(int64_t b) const {
    RETNET_CHECK(b >= 0 && b < session.batch(), "sequence {} does not exist (the session has {})",
                 b, session.batch());
  }
};

std::unique_ptr<PySession> make_session(std::shared_ptr<PyModel> model, int64_t capacity,
                                        int64_t prefill_chunk, int64_t history, int threads) {
  model->require_open();
  RETNET_CHECK(capacity >= 1, "capacity must be >= 1, got {}", capacity);
  RETNET_CHECK(prefill_chunk >= 0, "prefill_chunk must be >= 0, got {}", prefill_chunk);
  RETNET_CHECK(history >= 1, "history must be >= 1, got {}", history);
  RETNET_CHECK(threads >= 0, "threads must be >= 0 (0: automatic), got {}", threads);
  model->prepare_decoding();
  SessionOptions o;
  o.capacity = capacity;
  o.prefill_chunk = prefill_chunk;
  o.history = history;
  o.decode_threads = threads;
  return std::make_unique<PySession>(std::move(model), o);
}

SamplingParams sampling(float temperature, int64_t top_k, float top_p, float repeat_penalty,
                        int64_t repeat_last_n, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.repeat_penalty = repeat_penalty;
  p.repeat_last_n = repeat_last_n;
  p.seed = seed;
  p.validate();
  return p;
}

}  // namespace

void bind_session(py::module_& m) {
  py::class_<PySession>(
      m, "Session",
      "Decoding state of up to `capacity` sequences of one model: prefill prompts (chunkwise), "
      "step every sequence together (recurrent), sample, fork, save and load states.")
      .def(py::init(&make_session), py::arg("model"), py::arg("capacity") = 1,
           py::arg("prefill_chunk") = 0, py::arg("history") = 256, py::arg("threads") = 0,
           "prefill_chunk: the chunkwise chunk (0: the config's); history: recent tokens kept "
           "for the repetition penalty; threads: of a step (0: automatic).")
      .def_property_readonly("batch", [](const PySession& s) { return s.session.batch(); },
                             "Sequences in the session now.")
      .def_property_readonly("capacity", [](const PySession& s) { return s.session.capacity(); })
      .def_property_readonly("vocab_size", [](const PySession& s) { return s.session.vocab(); })
      .def_property_readonly("model", [](const PySession& s) { return s.model; })
      .def(
          "add_sequence",
          [](PySession& s) {
            std::lock_guard<std::mutex> lock(s.mutex);
            return s.session.add_sequence();
          },
          "Appends an empty sequence; returns its index.")
      .def(
          "remove_sequence",
          [](PySession& s, int64_t b) {
            std::lock_guard<std::mutex> lock(s.mutex);
            s.check_sequence(b);
            s.session.remove_sequence(b);
          },
          py::arg("b"), "Drops sequence b; the later ones move down one index.")
      .def(
          "reset",
          [](PySession& s, int64_t b) {
            std::lock_guard<std::mutex> lock(s.mutex);
            s.check_sequence(b);
            s.session.reset_sequence(b);
          },
          py::arg("b"), "Empties sequence b (position 0).")
      .def(
          "position",
          [](PySession& s, int64_t b) {
            s.check_sequence(b);
            return s.session.position(b);
          },
          py::arg("b"), "Tokens sequence b has consumed.")
      .def(
          "prefill",
          [](PySession& s, int64_t b, const py::handle& tokens) {
            s.check_sequence(b);
            TokenBatch tb = token_batch(tokens, s.session.vocab(), "tokens");
            RETNET_CHECK(tb.batch == 1 || py::array::ensure(tokens).ndim() == 1,
                         "prefill takes one sequence's tokens [T]");
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(s.mutex);
            s.session.prefill(b, tb.ids.data(), tb.length);
          },
          py::arg("b"), py::arg("tokens"), "Feeds tokens [T] to sequence b (chunkwise form).")
      .def(
          "step",
          [](PySession& s, const py::handle& tokens) {
            TokenBatch tb = token_batch(tokens, s.session.vocab(), "tokens");
            RETNET_CHECK(tb.batch * tb.length == s.session.batch(),
                         "step takes one token per sequence: {} tokens for {} sequences",
                         tb.batch * tb.length, s.session.batch());
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(s.mutex);
            s.session.step(tb.ids.data());
          },
          py::arg("tokens"), "One recurrent step: one token per sequence, in sequence order.")
      .def(
          "logits",
          [](py::object self, int64_t b) {
            PySession& s = self.cast<PySession&>();
            s.check_sequence(b);
            const float* p = s.session.logits(b);
            return float_view(const_cast<float*>(p), {s.session.vocab()}, self, false);
          },
          py::arg("b") = 0,
          "Logits after sequence b's last token: a read-only view [vocab] into the session (no "
          "copy; the next step or prefill changes it).")
      .def(
          "sample",
          [](PySession& s, int64_t b, float temperature, int64_t top_k, float top_p,
             float repeat_penalty, int64_t repeat_last_n, const py::object& seed,
             const py::object& stream) {
            s.check_sequence(b);
            const uint64_t drawn =
                seed.is_none() ? uint64_t{std::random_device{}()} : seed.cast<uint64_t>();
            const SamplingParams p =
                sampling(temperature, top_k, top_p, repeat_penalty, repeat_last_n, drawn);
            const uint64_t key = stream.is_none() ? 0 : stream.cast<uint64_t>();
            std::lock_guard<std::mutex> lock(s.mutex);
            return s.session.sample(b, p, key);
          },
          py::arg("b") = 0, py::arg("temperature") = 0.8f, py::arg("top_k") = 40,
          py::arg("top_p") = 0.95f, py::arg("repeat_penalty") = 1.0f,
          py::arg("repeat_last_n") = 64, py::arg("seed") = py::none(),
          py::arg("stream") = py::none(),
          "The next token of sequence b from its logits (temperature 0: greedy). Draws are keyed "
          "by (seed, stream, position); seed None: a random one; stream None: 0, as generate "
          "uses for every prompt, so a loop of sample and step gives generate's text.")
      .def(
          "state",
          [](py::object self, int64_t b) {
            PySession& s = self.cast<PySession&>();
            s.check_sequence(b);
            const int64_t floats = s.session.state_bytes_per_sequence() / sizeof(float);
            return float_view(s.session.state_data(b), {floats}, self, true);
          },
          py::arg("b") = 0,
          "Sequence b's constant-size recurrent state: a writable float32 view [floats] into the "
          "session (no copy; steps update it in place). Empty for attention and AFT, whose state "
          "is a growing cache.")
      .def(
          "set_state",
          [](PySession& s, int64_t b, const py::handle& state) {
            s.check_sequence(b);
            auto a = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(state);
            RETNET_CHECK(a, "state must be an array of numbers");
            const int64_t floats = s.session.state_bytes_per_sequence() / sizeof(float);
            RETNET_CHECK(a.size() == floats, "state has {} values, a sequence's state {}",
                         a.size(), floats);
            std::lock_guard<std::mutex> lock(s.mutex);
            std::memcpy(s.session.state_data(b), a.data(), floats * sizeof(float));
          },
          py::arg("b"), py::arg("state"),
          "Copies an array (the size of state(b)) into sequence b's state; position, logits and "
          "recent tokens stay.")
      .def(
          "fork",
          [](PySession& s, int64_t src, int64_t dst) {
            s.check_sequence(src);
            s.check_sequence(dst);
            std::lock_guard<std::mutex> lock(s.mutex);
            s.session.fork(src, dst);
          },
          py::arg("src"), py::arg("dst"),
          "Sequence dst becomes a copy of sequence src (state, position, logits, recent tokens).")
      .def(
          "save",
          [](PySession& s, const std::string& path, int64_t b) {
            s.check_sequence(b);
            py::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(s.mutex);
            s.session.save(path, b);
          },
          py::arg("path"), py::arg("b") = 0,
          "Saves sequence b to a checksummed state file naming the model (atomic).")
      .def(
          "load",
          [](PySession& s, const std::string& path, int64_t b) {
            s.check_sequence(b);
            std::string tail;
            {
              py::gil_scoped_release release;
              std::lock_guard<std::mutex> lock(s.mutex);
              tail = s.session.load(path, b);
            }
            return py::bytes(tail);
          },
          py::arg("path"), py::arg("b") = 0,
          "Restores a saved sequence into b; returns the unfinished UTF-8 bytes it stored.");
}

}  // namespace retnet::python
