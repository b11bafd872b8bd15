// Model.generate / Model.generate_batch / streaming: the engine's generate() over a Session, with
// the GIL released while it computes and Ctrl-C checked between decode steps.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <random>
#include <thread>

#include "binding.h"

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
};

GenerateOptions generate_options(const GenerateArgs& a, size_t sequences) {
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
  go.streams.resize(sequences);
  for (size_t i = 0; i < sequences; ++i) go.streams[i] = i;
  return go;
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
  std::unique_ptr<Session> session;
  std::vector<std::vector<int32_t>> prompts;
  GenerateOptions options;

  Generation(std::shared_ptr<PyModel> m, const std::vector<std::string>& texts,
             const GenerateArgs& a)
      : model(std::move(m)) {
    const Tokenizer& tok = model->require_tokenizer();
    for (size_t i = 0; i < texts.size(); ++i)
      prompts.push_back(encode_prompt(
          tok, texts[i], a.add_bos,
          texts.size() == 1 ? std::string("the prompt") : fmt::format("prompt {}", i)));
    options = generate_options(a, texts.size());
    model->prepare_decoding();
    SessionOptions so;
    so.capacity = static_cast<int64_t>(texts.size());
    so.history = std::max<int64_t>(a.repeat_last_n, 1);
    session = std::make_unique<Session>(model->model, so);
    for (size_t i = 0; i < texts.size(); ++i) session->add_sequence();
  }

  std::vector<SequenceResult> run(const TextCallback& on_text) {
    return generate(*session, *model->tokenizer, prompts, options, nullptr, on_text);
  }
};

std::vector<std::string> generate_blocking(std::shared_ptr<PyModel> model,
                                           const std::vector<std::string>& texts,
                                           const GenerateArgs& a) {
  RETNET_CHECK(!texts.empty(), "prompts is empty");
  Generation g(std::move(model), texts, a);
  // Taking the GIL for the check costs a wait whenever another Python thread runs, so it is
  // taken at most every 20 ms: Ctrl-C still stops within a step of that.
  g.options.before_step = [last = std::chrono::steady_clock::now()]() mutable {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::milliseconds(20)) return;
    last = now;
    check_python_signals();
  };
  py::gil_scoped_release release;
  std::vector<std::string> generated;
  // An unfinished character at the end shows as U+FFFD, as the CLI prints it.
  for (const auto& r : g.run(nullptr)) generated.push_back(r.text + utf8_sanitize(r.text_tail));
  return generated;
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

 private:
  struct Cancelled {};

  void work() {
    std::exception_ptr error;
    try {
      const std::vector<SequenceResult> results =
          generation_->run([this](int64_t, std::string_view text) { push(std::string(text)); });
      const std::string tail = utf8_sanitize(results[0].text_tail);
      if (!tail.empty()) push(tail);
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
      .def("__next__", &TextStream::next);

  auto model =
      py::reinterpret_borrow<py::class_<PyModel, std::shared_ptr<PyModel>>>(m.attr("Model"));
  model.def(
      "generate",
      [](std::shared_ptr<PyModel> self, const std::string& prompt, int64_t max_tokens,
         float temperature, int64_t top_k, float top_p, const py::object& stop,
         const py::object& seed, bool stream, float repeat_penalty, int64_t repeat_last_n,
         const py::object& add_bos, bool ignore_eos, float min_p, float presence_penalty,
         float frequency_penalty) -> py::object {
        GenerateArgs a{
            max_tokens,         temperature, top_p,   repeat_penalty, top_k, repeat_last_n,
            stop_strings(stop), seed,        add_bos, ignore_eos,     min_p, presence_penalty,
            frequency_penalty};
        if (!stream) return py::str(generate_blocking(std::move(self), {prompt}, a)[0]);
        return py::cast(std::make_unique<TextStream>(
            std::make_unique<Generation>(std::move(self), std::vector{prompt}, a)));
      },
      py::arg("prompt"), py::arg("max_tokens") = 128, py::arg("temperature") = 0.8f,
      py::arg("top_k") = 40, py::arg("top_p") = 0.95f, py::arg("stop") = py::none(),
      py::arg("seed") = py::none(), py::arg("stream") = false, py::arg("repeat_penalty") = 1.0f,
      py::arg("repeat_last_n") = 64, py::arg("add_bos") = py::none(), py::arg("ignore_eos") = false,
      py::arg("min_p") = 0.0f, py::arg("presence_penalty") = 0.0f,
      py::arg("frequency_penalty") = 0.0f,
      "Generated text after a prompt (chunkwise prefill, then recurrent decoding), as "
      "`retnet generate` makes it: the same seed gives the same text. stream=True returns an "
      "iterator of text pieces instead. stop: a string or list of strings the text ends before. "
      "seed None: random. add_bos None: as the tokenizer does. The GIL is released while it "
      "computes; Ctrl-C stops it between steps.");
  model.def(
      "generate_batch",
      [](std::shared_ptr<PyModel> self, const std::vector<std::string>& prompts, int64_t max_tokens,
         float temperature, int64_t top_k, float top_p, const py::object& stop,
         const py::object& seed, float repeat_penalty, int64_t repeat_last_n,
         const py::object& add_bos, bool ignore_eos, float min_p, float presence_penalty,
         float frequency_penalty) {
        GenerateArgs a{
            max_tokens,         temperature, top_p,   repeat_penalty, top_k, repeat_last_n,
            stop_strings(stop), seed,        add_bos, ignore_eos,     min_p, presence_penalty,
            frequency_penalty};
        return generate_blocking(std::move(self), prompts, a);
      },
      py::arg("prompts"), py::arg("max_tokens") = 128, py::arg("temperature") = 0.8f,
      py::arg("top_k") = 40, py::arg("top_p") = 0.95f, py::arg("stop") = py::none(),
      py::arg("seed") = py::none(), py::arg("repeat_penalty") = 1.0f, py::arg("repeat_last_n") = 64,
      py::arg("add_bos") = py::none(), py::arg("ignore_eos") = false, py::arg("min_p") = 0.0f,
      py::arg("presence_penalty") = 0.0f, py::arg("frequency_penalty") = 0.0f,
      "Generated texts of several prompts decoded together as one batch; prompt i samples "
      "stream i, so it gets the text it would get alone in a batch at index i.");
}

}  // namespace retnet::python
