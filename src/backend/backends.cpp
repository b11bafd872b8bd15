// The backends a model can run on, by name, and the model's choice of one.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "retnet/backend/backend.h"
#include "retnet/core/error.h"
#include "retnet/model/model.h"

namespace retnet {
namespace detail {

namespace {
const Backend* const kBackends[] = {&cpu_backend(), &reference_backend()};
}

const Backend& find_backend(const std::string& name) {
  for (const Backend* b : kBackends)
    if (name == b->name()) return *b;
  throw Error(fmt::format("unknown backend '{}' (expected one of: {})", name,
                          fmt::join(backend_names(), ", ")));
}

}  // namespace detail

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const detail::Backend* b : detail::kBackends) names.emplace_back(b->name());
  return names;
}

void Model::use_backend(const std::string& name) { backend_ = &detail::find_backend(name); }

const detail::Backend& Model::backend() const {
  return backend_ ? *backend_ : detail::cpu_backend();
}

}  // namespace retnet
