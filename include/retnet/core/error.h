#pragma once
// Errors: every user-facing failure (bad file, bad config, bad argument) is a retnet::Error whose
// message names the bad value and what was expected. Front ends print it and exit non-zero.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace retnet {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace retnet

// RETNET_CHECK(cond, "format {}", args...): throws retnet::Error with the formatted message.
#define RETNET_CHECK(cond, ...)                                         \
  do {                                                                  \
    if (!(cond)) throw ::retnet::Error(::fmt::format(__VA_ARGS__));     \
  } while (0)
