#pragma once
// Where sequence b of a call lives in a batched state or cache: a call may run a subset of a
// session's sequences, in any order (a server's decoding slots), each in place in its own row.
#include <cstdint>

namespace retnet {

// rows[b], or b when the call's sequences are the first rows in order (rows == nullptr).
inline int64_t sequence_row(const int64_t* rows, int64_t b) { return rows ? rows[b] : b; }

}  // namespace retnet
