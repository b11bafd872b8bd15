#pragma once
// Shared pieces of the Python bindings (one file per job: model, session, tokenizer, training).
// Every binding calls the public facade retnet/retnet.h; nothing here computes what the engine does.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "retnet/retnet.h"

namespace retnet::python {

namespace py = pybind11;

// A model as Python holds it: shared by the Model object, its sessions and its running streams, so
// it lives while any of them does. Calls that release the GIL lock `mutex` around the runner and
// decode preparation, so two Python threads never share scratch memory.
struct PyModel {
  PyModel(Model m, std::shared_ptr<Tokenizer> t)
      : model(std::move(m)), tokenizer(std::move(t)) {}
  Model model;
  std::shared_ptr<Tokenizer> tokenizer;  // may be null (a model built with no tokenizer)
  std::mutex mutex;
  std::unique_ptr<ModelRunner> runner;  // created on first use
  bool closed = false;                  // Model.close() was called
  std::string path;  // the file or directory it was loaded from; empty: built in memory

  // An Error saying the model is closed, if it is.
  void require_open() const;

  // The tokenizer, or an Error saying the model has none.
  const Tokenizer& require_tokenizer() const;
  // Packs the decode weights once (as `retnet generate` does), under the mutex.
  void prepare_decoding();
  // The tokenizer's vocabulary as a trie for constrained output, built on first use and kept:
  // building it walks every token's bytes, too slow to repeat per generate().
  std::shared_ptr<const TokenTrie> token_trie();
  std::shared_ptr<const TokenTrie> trie;  // token_trie()'s, under the mutex
};

// Token ids from an array-like of integers ([T] or [B, T]), each checked against the vocabulary.
struct TokenBatch {
  std::vector<int32_t> ids;  // [batch, length], row-major
  int64_t batch = 0, length = 0;
};
TokenBatch token_batch(const py::handle& tokens, int64_t vocab, const std::string& what);

// Raises the pending Python exception (KeyboardInterrupt from Ctrl-C) as a C++ exception when a
// signal handler asked for it. Takes the GIL; called between decode steps.
void check_python_signals();

// A read-only or writable NumPy view of engine memory; `owner` stays alive while the view does.
py::array float_view(float* data, std::vector<int64_t> shape, py::handle owner, bool writable);

void bind_tokenizer(py::module_& m);
void bind_model(py::module_& m);
void bind_session(py::module_& m);
void bind_generation(py::module_& m);
void bind_training(py::module_& m);
void bind_chat(py::module_& m);
void bind_structured_output(py::module_& m);

}  // namespace retnet::python
