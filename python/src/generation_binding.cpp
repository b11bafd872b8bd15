// Model.generate / Model.generate_batch / streaming: the engine's generate() over a Session, with
// the GIL released while it computes and Ctrl-C checked between decode steps.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <optional>
#include <random>
#include <thread>

#include "binding.h"
#include "retnet/infer/structured_output.h"

namespace retnet::python {
namespace {

struct GenerateArgs {
  int64_t max_tokens = 128;
  float temperature = 0.8f, top_p = 0.95f, repeat_penalty = 1.0f;
  int64_t top_k = 40, repeat_last_n = 64;
  std::vector<std::string> stop;
  py::object seed, add_bos;
  bool ignore_eos = false;
  float min_p = 0.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int64_t lookup = 0, draft_max = 8;  // speculative decoding (0: no prompt lookup)
  py::object draft_model;             // None or a Model drafting for speculative decoding
  // Constrained output: None (free text) or a _StructuredOutput (structured_output_binding.cpp).
  py::object constraint;
};

GenerateOptions generate_options(const GenerateArgs& a) {
  RETNET_CHECK(a.max_tokens >= 0, "max_tokens must be >= 0, got {}", a.max_tokens);
  GenerateOptions go;
  go.max_tokens = a.max_tokens;
  go.stop = a.stop;
  for (const auto& s : go.stop) RETNET_CHECK(!s.empty(), "stop strings must not be empty");
  go.stop_at_eos = !a.ignore_eos;
  go.sampling.temperature = a.temperature;
  go.sampling.top_k = a.top_k;
  go.sampling.top_p = a.top_p;
  go.sampling.repeat_penalty = a.repeat_penalty;
  go.sampling.repeat_last_n = a.repeat_last_n;
  go.sampling.min_p = a.min_p;
  go.sampling.presence_penalty = a.presence_penalty;
  go.sampling.frequency_penalty = a.frequency_penalty;
  go.sampling.seed = a.seed.is_none() ? std::random_device{}() : a.seed.cast<uint64_t>();
  go.sampling.validate();
  go.speculative.lookup = a.lookup;
  go.speculative.draft_max = a.draft_max;
  go.speculative.validate();
  if (!a.constraint.is_none()) go.grammar = a.constraint.cast<const StructuredOutput&>().grammar;
  return go;  // go.streams empty: every prompt gets the text it gets alone
}

// A prompt's ids as `retnet generate` makes them: the BOS its tokenizer.json puts first.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text,
                                   const py::object& add_bos, const std::string& what) {
  require_utf8(text, what);
  std::vector<int32_t> ids = tok.encode(text);
  const bool bos = add_bos.is_none() ? tok.adds_bos() : add_bos.cast<bool>();
  if (bos) {
    RETNET_CHECK(tok.bos_id() >= 0, "add_bos: the tokenizer has no beginning-of-sequence token");
    ids.insert(ids.begin(), tok.bos_id());
  }
  RETNET_CHECK(!ids.empty(), "{} is empty: give some text", what);
  return ids;
}

// Everything one generation needs, kept together so a streaming thread can own it.
struct Generation {
  std::shared_ptr<PyModel> model;
  std::shared_ptr<PyModel> draft;  // speculative decoding's draft model, or null
  std::unique_ptr<Session> session;
  std::vector<std::vector<int32_t>> prompts;
  GenerateOptions options;
  GenerationTimings timings;  // drafted and accepted tokens for the result's usage

  // Each prompt is a str (encoded as `retnet generate` does) or a list of token ids (as given).
  Generation(std::shared_ptr<PyModel> m, const py::list& inputs, const GenerateArgs& a)
      : model(std::move(m)) {
    model->require_open();
    RETNET_CHECK(!inputs.empty(), "prompts is empty");
    const Tokenizer& tok = model->require_tokenizer();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string what =
          inputs.size() == 1 ? std::string("the prompt") : fmt::format("prompt {}", i);
      if (py::isinstance<py::str>(inputs[i])) {
        prompts.push_back(encode_prompt(tok, inputs[i].cast<std::string>(), a.add_bos, what));
        continue;
      }
      TokenBatch ids = token_batch(inputs[i], model->model.config().vocab_size, what);
      RETNET_CHECK(ids.batch == 1 && !ids.ids.empty(), "{} must be a non-empty list of token ids",
                   what);
      prompts.push_back(std::move(ids.ids));
    }
    options = generate_options(a);
    if (options.grammar) options.trie = model->token_trie();
    if (!a.draft_model.is_none()) use_draft_model(a.draft_model.cast<std::shared_ptr<PyModel>>());
    model->prepare_decoding();
    SessionOptions so;
    so.capacity = static_cast<int64_t>(inputs.size());
    so.history = std::max<int64_t>(a.repeat_last_n, 1);
    session = std::make_unique<Session>(model->model, so);
    for (size_t i = 0; i < inputs.size(); ++i) session->add_sequence();
  }

  std::vector<SequenceResult> run(const TextCallback& on_text) {
    return generate(*session, *model->tokenizer, prompts, options, &timings, on_text);
  }

  // Drafts must be the model's own tokens: the same vocabulary and tokenizer.
  void use_draft_model(std::shared_ptr<PyModel> d) {
    d->require_open();
    const int64_t V = model->model.config().vocab_size, draft_V = d->model.config().vocab_size;
    RETNET_CHECK(draft_V == V,
                 "speculative draft_model has a vocabulary of {} tokens, the model {}", draft_V, V);
    RETNET_CHECK(d->tokenizer && d->tokenizer->serialize() == model->tokenizer->serialize(),
                 "speculative draft_model has another tokenizer ({}) than the model ({}): drafts "
                 "must be the model's tokens",
                 d->tokenizer ? d->tokenizer->kind() : "none", model->tokenizer->kind());
    d->prepare_decoding();
    draft = std::move(d);
    options.speculative.draft_model = &draft->model;
  }
};

// A result as the Python side's Completion takes it; the text ends with an unfinished
// character as U+FFFD, as the CLI prints it.
py::dict result_dict(const SequenceResult& r, const Generation& g) {
  py::dict d;
  d["text"] = py::str(r.text + utf8_sanitize(r.text_tail));
  d["tokens"] = py::cast(r.tokens);
  d["finish_reason"] = py::str(r.finish_reason);
  d["prompt_tokens"] = r.prompt_tokens;
  d["completion_tokens"] = r.generated_tokens;
  if (g.options.speculative.enabled()) {
    py::dict spec;
    spec["checks"] = g.timings.checks;
    spec["drafted_tokens"] = g.timings.drafted_tokens;
    spec["accepted_tokens"] = g.timings.accepted_tokens;
    d["speculative"] = spec;
  }
  return d;
}

py::list generate_blocking(std::shared_ptr<PyModel> model, const py::list& inputs,
                           const GenerateArgs& a) {
  Generation g(std::move(model), inputs, a);
  // Taking the GIL for the check costs a wait whenever another Python thread runs, so it is
  // taken at most every 20 ms: Ctrl-C still stops within a step of that.
  g.options.before_step = [last = std::chrono::steady_clock::now()]() mutable {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(20)) return;
    last = now;
    check_python_signals();
  };
  std::vector<SequenceResult> results;
  {
    py::gil_scoped_release release;
    results = g.run(nullptr);
  }
  py::list out;
  for (const auto& r : results) out.append(result_dict(r, g));
  return out;
}

// Text pieces of one generation as a Python iterator: the generation runs on its own thread (no
// GIL needed there) and hands pieces over through a queue; dropping the iterator stops it.
class TextStream {
 public:
  TextStream(std::unique_ptr<Generation> g) : generation_(std::move(g)) {
    generation_->options.before_step = [this] {
      if (cancelled_) throw Cancelled{};
    };
    worker_ = std::thread([this] { work(); });
  }
  ~TextStream() { stop(); }

  // The next piece; StopIteration at the end; KeyboardInterrupt (or the engine's error) stops it.
  py::str next() {
    std::string piece;
    for (;;) {
      {
        py::gil_scoped_release release;
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait_for(lock, std::chrono::milliseconds(50),
                        [this] { return !pieces_.empty() || done_; });
        if (!pieces_.empty()) {
          piece = std::move(pieces_.front());
          pieces_.pop_front();
          break;
        }
        if (done_) {
          if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
          throw py::stop_iteration();
        }
      }
      if (PyErr_CheckSignals() != 0) {
        stop();
        throw py::error_already_set();
      }
    }
    return py::str(piece);
  }

  // The generation's result dict once the iterator is exhausted, else None.
  py::object result() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_ || !result_) return py::none();
    return result_dict(*result_, *generation_);
  }

 private:
  struct Cancelled {};

  void work() {
    std::exception_ptr error;
    try {
      const std::vector<SequenceResult> results =
          generation_->run([this](int64_t, std::string_view text) { push(std::string(text)); });
      const std::string tail = utf8_sanitize(results[0].text_tail);
      if (!tail.empty()) push(tail);
      std::lock_guard<std::mutex> lock(mutex_);
      result_ = results[0];
    } catch (const Cancelled&) {
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    done_ = true;
    ready_.notify_all();
  }

  void push(std::string text) {
    std::lock_guard<std::mutex> lock(mutex_);
    pieces_.push_back(std::move(text));
    ready_.notify_all();
  }

  void stop() {
    cancelled_ = true;
    if (worker_.joinable()) {
      py::gil_scoped_release release;
      worker_.join();
    }
  }

  std::unique_ptr<Generation> generation_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::string> pieces_;
  bool done_ = false;
  std::exception_ptr error_;
  std::optional<SequenceResult> result_;
  std::atomic<bool> cancelled_{false};
};

// `stop`: None, one string, or a list of strings.
std::vector<std::string> stop_strings(const py::object& stop) {
  if (stop.is_none()) return {};
  if (py::isinstance<py::str>(stop)) return {stop.cast<std::string>()};
  return stop.cast<std::vector<std::string>>();
}

}  // namespace

void bind_generation(py::module_& m) {
  py::class_<TextStream>(m, "TextStream",
                         "Iterator over the text pieces of a streaming generation.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", &TextStream::next)
      .def("_result", &TextStream::result);

  auto model =
      py::reinterpret_borrow<py::class_<PyModel, std::shared_ptr<PyModel>>>(m.attr("Model"));
  // The engine side of Model.generate / generate_batch (python/retnet/generation.py checks the
  // argument types and wraps the result dicts): prompts is a list of str or token-id lists.
  model.def(
      "_generate",
      [](std::shared_ptr<PyModel> self, const py::list& prompts, int64_t max_tokens,
         float temperature, int64_t top_k, float top_p, const py::object& stop,
         const py::object& seed, bool stream, float repeat_penalty, int64_t repeat_last_n,
         const py::object& add_bos, bool ignore_eos, float min_p, float presence_penalty,
         float frequency_penalty, int64_t lookup, int64_t draft_max, const py::object& draft_model,
         const py::object& constraint) -> py::object {
        GenerateArgs a{
            max_tokens,         temperature, top_p,     repeat_penalty, top_k, repeat_last_n,
            stop_strings(stop), seed,        add_bos,   ignore_eos,     min_p, presence_penalty,
            frequency_penalty,  lookup,      draft_max, draft_model,    constraint};
        if (!stream) return generate_blocking(std::move(self), prompts, a);
        return py::cast(std::make_unique<TextStream>(
            std::make_unique<Generation>(std::move(self), prompts, a)));
      },
      py::arg("prompts"), py::arg("max_tokens"), py::arg("temperature"), py::arg("top_k"),
      py::arg("top_p"), py::arg("stop"), py::arg("seed"), py::arg("stream"),
      py::arg("repeat_penalty"), py::arg("repeat_last_n"), py::arg("add_bos"),
      py::arg("ignore_eos"), py::arg("min_p"), py::arg("presence_penalty"),
      py::arg("frequency_penalty"), py::arg("lookup") = 0, py::arg("draft_max") = 8,
      py::arg("draft_model") = py::none(), py::arg("constraint") = py::none());
}

}  // namespace retnet::python
