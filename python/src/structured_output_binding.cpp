// Structured output as the library reads it (retnet/infer/structured_output.h), the same reading
// as `retnet serve`'s: response_format, grammar and, in a chat, tools and tool_choice.
#include "binding.h"
#include "retnet/core/json_parse.h"
#include "retnet/infer/structured_output.h"

namespace retnet::python {

void bind_structured_output(py::module_& m) {
  py::class_<StructuredOutput, std::shared_ptr<StructuredOutput>>(
      m, "_StructuredOutput",
      "A request's structured output: the grammar that masks sampling and, with tools offered, "
      "what makes a reply a tool call.")
      .def_property_readonly("constrained",
                             [](const StructuredOutput& s) { return s.grammar != nullptr; })
      .def_readonly("tool_call", &StructuredOutput::tool_call,
                    "The reply must be a call (tool_choice required or a named function).")
      .def_property_readonly("offers_tools",
                             [](const StructuredOutput& s) { return s.call != nullptr; })
      .def_property_readonly("prose_may_stop", &StructuredOutput::prose_may_stop,
                             "Whether the chat template's turn-end strings may end the reply.")
      .def("reply_is_call", &reply_is_call, py::arg("text"), py::arg("finish_reason"))
      .def(
          "tool_calls_json",
          [](const StructuredOutput&, const std::string& text, bool with_index) {
            return tool_calls_json(text, with_index).dump();
          },
          py::arg("text"), py::arg("with_index"),
          "OpenAI's tool_calls (JSON text) for a reply that is a call.");

  // `request_json`: a JSON object with the request's fields (the others are left alone).
  m.def(
      "_structured_output",
      [](const std::string& request_json, bool chat) {
        return std::make_shared<StructuredOutput>(
            parse_structured_output(parse_ordered_json(request_json, "the request"), chat));
      },
      py::arg("request_json"), py::arg("chat"));
  // An assistant message's tool_calls (JSON text) as a chat template reads them (JSON text).
  m.def(
      "_history_tool_calls",
      [](const std::string& calls_json, const std::string& where) {
        return history_tool_calls(nlohmann::json::parse(calls_json), where).dump();
      },
      py::arg("calls_json"), py::arg("where"));
}

}  // namespace retnet::python
