#pragma once
// This process's resident memory and the machine's, for the statistics commands and benchmarks
// print.
#include <cstdint>

namespace retnet {

// Peak resident set size (VmHWM of /proc/self/status), bytes.
int64_t peak_rss_bytes();
// Sets the peak resident set size back to the current one (writes 5 to /proc/self/clear_refs), so
// that a later peak_rss_bytes() measures one phase alone (a benchmark loading several models one
// after another); false where the kernel does not allow it (the peak then stays the process's).
bool reset_peak_rss();
// Current resident set size (VmRSS of /proc/self/status), bytes; 0 if unreadable.
int64_t current_rss_bytes();
// A field of /proc/meminfo (MemTotal, MemAvailable) in bytes; 0 if unreadable.
int64_t meminfo_bytes(const char* field);

}  // namespace retnet
