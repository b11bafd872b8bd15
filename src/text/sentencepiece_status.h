#pragma once
// SentencePiece's error text without its source location and failed condition:
// "./src/trainer_interface.cc(580) [cond] Vocabulary size ..." -> "Vocabulary size ...";
// a model that does not parse says so in words.
#include <sentencepiece_processor.h>

#include <string>

namespace retnet {

inline std::string sentencepiece_reason(const sentencepiece::util::Status& status) {
  std::string message = status.message();
  if (message.find("ParseFromArray") != std::string::npos)
    return "the bytes do not parse as a SentencePiece model (truncated, or another kind of file)";
  const size_t bracket = message.find("] ");
  if (message.rfind("./src/", 0) == 0 && bracket != std::string::npos)
    message.erase(0, bracket + 2);
  return message;
}

}  // namespace retnet
