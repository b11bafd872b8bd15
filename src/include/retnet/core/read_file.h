#pragma once
// Reading a whole file with errors that name it: "prompt file 'p.txt' is a directory, not a
// regular file" (FIFOs and devices are refused the same way, before they can block or never end),
// "cannot read config file 'c.json': No such file or directory" (a std::ifstream on a directory
// throws basic_filebuf::underflow, naming nothing).
#include <string>

namespace retnet {

// The file's bytes. `what` describes the file in errors ("prompt file"); empty: just the path.
std::string read_file(const std::string& path, const std::string& what = "");

}  // namespace retnet
