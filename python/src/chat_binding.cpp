// Model's chat template: the one `retnet serve` and `retnet chat-template` use for the same model
// (its directory's tokenizer_config.json or chat_template.jinja, else the default template),
// rendered by the engine's Jinja renderer (retnet/text/chat_template.h).
#include "binding.h"
#include "retnet/core/json_parse.h"

namespace retnet::python {
namespace {

// The model's template source; a model built in memory (init, from_arrays) has the default one.
ChatTemplateSource template_source(const PyModel& m) {
  m.require_open();
  return load_chat_template(m.path);
}

// Stop strings the template implies, as the server's ChatFormatter sets them: the default
// template's turn end, else the model's EOS token written as text.
std::vector<std::string> template_stops(const ChatTemplateSource& source) {
  if (source.source == default_chat_template()) return {"<|end|>"};
  if (!source.eos_token.empty()) return {source.eos_token};
  return {};
}

// `messages_json` is a JSON list of messages and `variables_json` an object of further template
// variables (tools, documents, ...), both as Python's json module writes them.
std::string render(const PyModel& m, const std::string& messages_json, bool add_generation_prompt,
                   const std::string& variables_json) {
  const ChatTemplateSource source = template_source(m);
  const nlohmann::ordered_json messages = parse_ordered_json(messages_json, "messages");
  const nlohmann::ordered_json variables =
      parse_ordered_json(variables_json, "the chat template's variables");
  const ChatTemplate chat = ChatTemplate::parse(source.source, source.origin);
  py::gil_scoped_release release;  // a large template may take a while
  return apply_chat_template(chat, messages, add_generation_prompt, source.bos_token,
                             source.eos_token, variables);
}

}  // namespace

void bind_chat(py::module_& m) {
  auto model =
      py::reinterpret_borrow<py::class_<PyModel, std::shared_ptr<PyModel>>>(m.attr("Model"));
  // The engine side of Model.apply_chat_template / chat (python/retnet/chat.py checks the
  // arguments and turns them into JSON).
  model.def("_render_chat", &render, py::arg("messages_json"), py::arg("add_generation_prompt"),
            py::arg("variables_json"));
  model.def(
      "_chat_template",
      [](const PyModel& p) {
        const ChatTemplateSource source = template_source(p);
        py::dict d;
        d["source"] = source.source;
        d["origin"] = source.origin;
        d["bos_token"] = source.bos_token;
        d["eos_token"] = source.eos_token;
        d["stop"] = py::cast(template_stops(source));
        return d;
      },
      "The chat template: source, origin, bos_token, eos_token and the stop strings it implies.");
}

}  // namespace retnet::python
