#include "retnet/core/form.h"

#include "retnet/core/error.h"

namespace retnet {

const char* form_name(Form form) {
  switch (form) {
    case Form::Parallel: return "parallel";
    case Form::Recurrent: return "recurrent";
    case Form::Chunkwise: return "chunkwise";
    case Form::Scan: return "scan";
  }
  return "?";
}

Form parse_form(const std::string& name) {
  for (Form f : {Form::Parallel, Form::Recurrent, Form::Chunkwise, Form::Scan})
    if (name == form_name(f)) return f;
  throw Error(
      fmt::format("unknown form '{}'; expected parallel, recurrent, chunkwise or scan", name));
}

}  // namespace retnet
