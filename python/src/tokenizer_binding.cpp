// retnet.Tokenizer: text <-> token ids with the engine's tokenizers (bytes, SentencePiece,
// Hugging Face tokenizer.json).
#include "binding.h"

namespace retnet::python {
namespace {

void check_id(const Tokenizer& t, int64_t id) {
  RETNET_CHECK(id >= 0 && id < t.vocab_size(), "token id {} is outside the vocabulary [0, {})", id,
               t.vocab_size());
}

py::object optional_id(int32_t id) { return id < 0 ? py::none() : py::object(py::int_(id)); }

}  // namespace

void bind_tokenizer(py::module_& m) {
  py::class_<Tokenizer, std::shared_ptr<Tokenizer>>(
      m, "Tokenizer",
      "Text <-> token ids: byte-level, SentencePiece or a Hugging Face tokenizer.json (BPE).\n"
      "Get one from a model (`model.tokenizer`) or with `Tokenizer.load(spec)`.")
      .def_static(
          "load",
          [](const std::string& spec) { return std::shared_ptr<Tokenizer>(load_tokenizer(spec)); },
          py::arg("spec"),
          "Loads a tokenizer: \"bytes\", a SentencePiece .model file, a tokenizer.json (or a "
          "directory holding one), or a model .safetensors file whose tokenizer to reuse.")
      .def_property_readonly("kind", &Tokenizer::kind, "\"bytes\", \"sentencepiece\" or \"hf\".")
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly(
          "eos_id", [](const Tokenizer& t) { return optional_id(t.eos_id()); },
          "End-of-sequence id, or None.")
      .def_property_readonly(
          "bos_id", [](const Tokenizer& t) { return optional_id(t.bos_id()); },
          "Beginning-of-sequence id, or None.")
      .def_property_readonly("adds_bos", &Tokenizer::adds_bos,
                             "Whether the tokenizer's pipeline puts bos_id before a text "
                             "(generate does then; encode never adds it).")
      .def(
          "encode",
          [](const Tokenizer& t, const std::string& text) {
            check_encodable(t, text, "the text");
            py::gil_scoped_release release;
            return t.encode(text);
          },
          py::arg("text"), "Token ids of a text (no BOS or EOS added).")
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int64_t>& ids) {
            std::vector<int32_t> narrow;
            narrow.reserve(ids.size());
            for (int64_t id : ids) {
              check_id(t, id);
              narrow.push_back(static_cast<int32_t>(id));
            }
            const std::string bytes = t.decode(narrow);
            // Ids may end inside a multi-byte character: those bytes decode as U+FFFD.
            return py::reinterpret_steal<py::str>(
                PyUnicode_DecodeUTF8(bytes.data(), static_cast<py::ssize_t>(bytes.size()), "replace"));
          },
          py::arg("ids"), "The text of token ids (incomplete UTF-8 becomes U+FFFD).")
      .def(
          "token_bytes",
          [](const Tokenizer& t, int64_t id) {
            check_id(t, id);
            return py::bytes(t.token_bytes(static_cast<int32_t>(id)));
          },
          py::arg("id"), "The exact bytes one token stands for after other text.")
      .def("__repr__", [](const Tokenizer& t) {
        return "<retnet.Tokenizer " + t.kind() + ", vocab_size=" + std::to_string(t.vocab_size()) +
               ">";
      });
}

}  // namespace retnet::python
