#pragma once
// Grammars written as text in llama.cpp's GBNF, read into a byte-level Grammar
// (retnet/infer/grammar.h). The subset read (docs/server.md, "grammar"):
//   name ::= alternatives        a rule per line (a newline may come after `::=`, `|` or `(`,
//                                and before `|`);
//                                names are letters, digits, '-' and '_'; `root` is the start
//   "literal"                    with escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH
//   [a-z0-9_] [^"\\]             character classes (of code points, matched as UTF-8)
//   .                            any character
//   ( ... )  a | b               grouping and alternation
//   x*  x+  x?  x{m}  x{m,}  x{,n}  x{m,n}   repetition (m, n up to 1024)
//   # comment                    to the end of the line
// Escapes name code points (\xE9 is "é", two bytes of UTF-8), as in llama.cpp.
#include <memory>
#include <string>

#include "retnet/core/error.h"
#include "retnet/infer/grammar.h"

namespace retnet {

// A grammar text that does not parse, or describes a grammar the recognizer cannot run (an
// undefined or left-recursive rule, no `root`): the message names the line and column.
struct GbnfError : Error {
  GbnfError(int line, int column, const std::string& message);
  int line, column;  // 1-based; column counts bytes
};

std::shared_ptr<const Grammar> parse_gbnf(const std::string& text);

}  // namespace retnet
