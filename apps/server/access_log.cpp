#include "access_log.h"

#include <fmt/format.h>

#include "openai_response.h"

namespace retnet::server {
namespace {

// Printable ASCII as it is, other bytes percent-encoded: a path cannot break the line.
std::string printable_path(const std::string& path) {
  std::string out;
  for (unsigned char c : path)
    if (c > 0x20 && c < 0x7f && c != '%')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  return out;
}

}  // namespace

RequestNote& request_note() {
  thread_local RequestNote note;
  return note;
}

std::string access_log_line(const httplib::Request& req, const httplib::Response& res,
                            const RequestNote& note, double milliseconds, bool with_prompt) {
  std::string line = fmt::format("retnet serve: {} {} {} {}", printable_path(req.remote_addr),
                                 printable_path(req.method), printable_path(req.path), res.status);
  if (note.job) {
    Job& job = *note.job;
    std::lock_guard<std::mutex> lock(job.mutex);
    int64_t completion = 0;
    for (const ChoiceOutput& c : job.choices) completion += c.completion_tokens;
    line += fmt::format(" prompt_tokens={} cached_tokens={} completion_tokens={}",
                        job.prompt.size(), job.cached_tokens, completion);
  }
  line += fmt::format(" ms={:.1f}", milliseconds);
  // JSON-escaped: control characters and newlines in the text stay on this line.
  if (with_prompt && note.job) line += " prompt=" + json_text(note.prompt_text);
  return line;
}

}  // namespace retnet::server
