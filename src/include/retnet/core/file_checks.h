#pragma once
// Paths from outside: read only regular files (a FIFO blocks open() for ever, /dev/zero never
// ends, a directory reads as an error naming nothing), never write over a command's own input,
// and report file-system failures as retnet::Error naming the path and the reason.
#include <filesystem>
#include <string>
#include <system_error>

namespace retnet {

// "a FIFO", "a character device", "a directory", ... for a stat() st_mode.
std::string file_type_name(unsigned mode);

// Opens `path` read-only and returns the descriptor (O_CLOEXEC, blocking; the caller closes it).
// Anything but a regular file is refused by name before it is opened for reading ("state file
// '/dev/zero' is a character device, not a regular file"); `what` describes the file ("state
// file"), empty for just the path.
int open_regular_file(const std::string& path, const std::string& what = "");

// Throws unless `path` is missing or a regular file (for inputs probed before they are read).
void check_regular_or_missing(const std::string& path, const std::string& what = "");

// Whether two paths name the same file: same device and inode when both exist, else the same
// weakly canonical path.
bool same_file(const std::string& a, const std::string& b);

// Refuses to write `output` over `input` of the same command, naming both.
void check_not_same_file(const std::string& output, const std::string& output_what,
                         const std::string& input, const std::string& input_what);

// A std::filesystem or errno failure as a retnet::Error: "cannot <action> '<path>': <reason>".
[[noreturn]] void throw_file_error(const std::string& action, const std::string& path,
                                   const std::error_code& ec);

}  // namespace retnet
