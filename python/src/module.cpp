// The extension module retnet._retnet: errors, threads and the pieces shared by the bindings.
#include <Python.h>

#include "binding.h"
#include "retnet/infer/grammar.h"
#include "retnet/core/isa_kernels.h"
#include "retnet/core/thread_policy.h"

namespace retnet::python {

const Tokenizer& PyModel::require_tokenizer() const {
  RETNET_CHECK(tokenizer != nullptr,
               "this model has no tokenizer: pass tokenizer= to retnet.init or load a model file");
  return *tokenizer;
}

void PyModel::require_open() const {
  RETNET_CHECK(!closed,
               "this Model is closed (Model.close() or the end of its `with` block): "
               "load it again to use it");
}

void PyModel::prepare_decoding() {
  std::lock_guard<std::mutex> lock(mutex);
  if (!model.decode_prepared()) model.prepare_decode(DecodePrecision::F32);
}

std::shared_ptr<const TokenTrie> PyModel::token_trie() {
  const Tokenizer& tok = require_tokenizer();
  std::lock_guard<std::mutex> lock(mutex);
  if (!trie) trie = std::make_shared<const TokenTrie>(tok);
  return trie;
}

TokenBatch token_batch(const py::handle& tokens, int64_t vocab, const std::string& what) {
  py::array a = py::array::ensure(tokens);
  RETNET_CHECK(a, "{} must be an array-like of integer token ids", what);
  RETNET_CHECK(a.ndim() == 1 || a.ndim() == 2, "{} must have shape [T] or [B, T], got {} dimensions",
               what, a.ndim());
  const char kind = a.dtype().kind();
  RETNET_CHECK(a.size() == 0 || kind == 'i' || kind == 'u',
               "{} must hold integers, got dtype kind '{}'", what, kind);
  TokenBatch out;
  out.batch = a.ndim() == 2 ? a.shape(0) : 1;
  out.length = a.ndim() == 2 ? a.shape(1) : a.shape(0);
  auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  out.ids.resize(static_cast<size_t>(a.size()));
  const int64_t* p = ints.data();
  for (size_t i = 0; i < out.ids.size(); ++i) {
    RETNET_CHECK(p[i] >= 0 && p[i] < vocab, "{}: token id {} at index {} is outside [0, {})", what,
                 p[i], i, vocab);
    out.ids[i] = static_cast<int32_t>(p[i]);
  }
  return out;
}

void check_python_signals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::array float_view(float* data, std::vector<int64_t> shape, py::handle owner, bool writable) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  py::array view(py::dtype::of<float>(), dims, {}, data, owner);
  if (!writable) view.attr("flags").attr("writeable") = false;
  return view;
}

}  // namespace retnet::python

PYBIND11_MODULE(_retnet, m) {
  namespace py = pybind11;
  namespace rp = retnet::python;
  m.doc() = "The retnet engine's C++ core (use the `retnet` package, which re-exports it).";
  // Every engine failure is a retnet.Error; a ValueError, as it names a bad input.
  py::register_exception<retnet::Error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = RETNET_VERSION;
  m.def("set_num_threads", &retnet::set_num_threads, py::arg("threads"),
        "Threads of the engine's loops and BLAS (<= 0: all cores).");
  m.def("num_threads", &retnet::num_threads, "Threads the engine's loops use.");
  // retnet/__init__.py chose OpenMP's waiting policy before loading this module (and OpenMP).
  retnet::adopt_thread_policy();
  m.def("thread_policy", &retnet::thread_policy,
        "How the engine's OpenMP threads wait for work: the engine's policy or the environment's.");
  m.def("kernels", &retnet::kernel_summary,
        "The instruction-set level of the kernels each family runs at (as `retnet --version`).");
  rp::bind_tokenizer(m);
  rp::bind_model(m);
  rp::bind_session(m);
  rp::bind_generation(m);
  rp::bind_training(m);
  rp::bind_chat(m);
  rp::bind_structured_output(m);
}
