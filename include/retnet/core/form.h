#pragma once
// The forms a token mixer can compute its one function in. Every kernel, block, the model's layer
// loops, the trainer and the front ends use this one enum; which forms a mixer has is its spec's
// (model/mixer.h).
//   parallel:  all positions at once from an empty state (training; prefill of the cached mixers)
//   recurrent: one token at a time, reading and updating a state (decoding)
//   chunkwise: chunks in parallel, carrying the state between them (long prefill and training)
//   scan:      an associative scan over (state, decay) pairs (retention only)
#include <string>

namespace retnet {

enum class Form { Parallel, Recurrent, Chunkwise, Scan };

const char* form_name(Form form);             // "parallel", "recurrent", "chunkwise", "scan"
Form parse_form(const std::string& name);     // throws Error naming the valid forms

}  // namespace retnet
