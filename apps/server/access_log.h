#pragma once
// The server's access log: one line on stderr per request, written once its response has been
// sent (a stream: once it has ended): client, method, path, status, for generation requests the
// prompt (cached) and completion tokens, and the milliseconds since its first byte arrived. The
// prompt's text only with --log-prompts.
#include <httplib.h>

#include <memory>
#include <string>

#include "job.h"

namespace retnet::server {

// What the handler of this thread's request tells the log: the job it queued (its tokens are
// read when the line is written) and the prompt's text.
struct RequestNote {
  std::shared_ptr<Job> job;
  std::string prompt_text;
};

// This thread's note; the log line clears it.
RequestNote& request_note();

// The line for a finished request (without the trailing newline).
std::string access_log_line(const httplib::Request& req, const httplib::Response& res,
                            const RequestNote& note, double milliseconds, bool with_prompt);

}  // namespace retnet::server
