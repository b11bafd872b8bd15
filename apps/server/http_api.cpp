#include "http_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "access_log.h"
#include "chat_page.h"
#include "client_socket.h"
#include "guarded_server.h"
#include "openai_response.h"
#include "retnet/core/json_parse.h"

namespace retnet::server {
namespace {

// The shortest time between two chunks of one stream. A millisecond is below what a reader
// sees, and above a small model's time per token (a write and a wake-up each).
constexpr std::chrono::microseconds kStreamChunkInterval{1000};

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Compares without returning early, so that the time taken says nothing about how much of a key
// matched. The length is not secret.
bool constant_time_equal(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  return diff == 0;
}

uint64_t random_bits() {
  static std::mutex mutex;
  static std::random_device device;
  std::lock_guard<std::mutex> lock(mutex);
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// 63 bits: the reply reports it, and a client sends it back as a JSON integer.
uint64_t random_seed() { return random_bits() & static_cast<uint64_t>(INT64_MAX); }

// "chatcmpl-" or "cmpl-" and 96 random bits in hex: unique across requests and restarts.
std::string response_id(bool chat) {
  return fmt::format("{}-{:016x}{:08x}", chat ? "chatcmpl" : "cmpl", random_bits(),
                     static_cast<uint32_t>(random_bits()));
}

std::string sse(const nlohmann::json& j) { return "data: " + json_text(j) + "\n\n"; }

// What the inference thread has produced for a job since the last call: per choice, the new text
// and log-probabilities, and whether (and why) it ended.
struct Taken {
  std::vector<ChoiceOutput> choices;
  bool finished = false;
  std::string error;
  int error_status = 0;
  Usage usage;  // the prompt once, the completion tokens of every choice
  Timings timings;
};

// Waits up to `wait` for the end or, unless `until_finished`, for output; then takes what there
// is.
Taken take_output(Job& job, std::chrono::milliseconds wait, bool until_finished = false) {
  std::unique_lock<std::mutex> lock(job.mutex);
  job.changed.wait_for(lock, wait, [&] {
    return job.finished || (!until_finished && std::any_of(job.choices.begin(), job.choices.end(),
                                                           [](const ChoiceOutput& c) {
                                                             return !c.text.empty() ||
                                                                    !c.logprobs.empty();
                                                           }));
  });
  Taken t;
  t.choices.resize(job.choices.size());
  t.usage = {job.prompt_tokens, job.cached_tokens, 0};
  t.usage.speculative = job.lookup > 0 || job.draft_model;
  for (size_t i = 0; i < job.choices.size(); ++i) {
    ChoiceOutput& from = job.choices[i];
    ChoiceOutput& to = t.choices[i];
    to.text.swap(from.text);
    to.logprobs.swap(from.logprobs);
    to.finished = from.finished;
    to.finish_reason = from.finish_reason;
    to.completion_tokens = from.completion_tokens;
    t.usage.completion_tokens += from.completion_tokens;
    t.usage.checks += from.checks;
    t.usage.drafted_tokens += from.drafted_tokens;
    t.usage.accepted_tokens += from.accepted_tokens;
  }
  t.finished = job.finished;
  t.error = job.error;
  t.error_status = job.error_status;
  t.timings = job_timings(job);
  return t;
}

// Where a request's path, query or headers hold bytes that are not UTF-8, in words that quote
// none of them ("header 'X-Name' (byte 0xff at offset 3)"); empty when all are valid. The body
// is checked where it is parsed.
std::string invalid_utf8_in(const httplib::Request& req) {
  size_t bad = 0;
  auto where = [&bad](const std::string& what, const std::string& text) {
    return fmt::format("{} (byte 0x{:02x} at offset {})", what,
                       static_cast<unsigned char>(text[bad]), bad);
  };
  if (!utf8_valid(req.path, &bad)) return where("the path", req.path);
  for (const auto& [key, value] : req.params) {
    if (!utf8_valid(key, &bad)) return where("a query parameter name", key);
    if (!utf8_valid(value, &bad)) return where(fmt::format("query parameter '{}'", key), value);
  }
  for (const auto& [key, value] : req.headers) {
    if (!utf8_valid(key, &bad)) return where("a header name", key);
    if (!utf8_valid(value, &bad)) return where(fmt::format("header '{}'", key), value);
  }
  return "";
}

}  // namespace

HttpApi::HttpApi(const ServeOptions& options, const std::string& model_id, const Model& model,
                 const Tokenizer& tokenizer, const ChatFormatter& chat, Scheduler& scheduler,
                 Metrics& metrics)
    : options_(options),
      model_id_(model_id),
      model_(model),
      tokenizer_(tokenizer),
      chat_(chat),
      scheduler_(scheduler),
      metrics_(metrics) {}

bool HttpApi::authorized(const httplib::Request& req) const {
  if (options_.api_keys.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (header.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string given = header.substr(prefix.size());
  bool ok = false;
  for (const auto& key : options_.api_keys) ok |= constant_time_equal(given, key);
  return ok;
}

void HttpApi::send_error(httplib::Response& res, int status, const std::string& message,
                         const std::string& type, const std::string& code,
                         const std::string& param) {
  metrics_.rejected += 1;
  res.status = status;
  res.set_content(json_text(error_json(message, type, code, param)), "application/json");
}

bool HttpApi::cors_allows(const std::string& origin) const {
  for (const std::string& allowed : options_.cors_origins)
    if (allowed == "*" || allowed == origin) return true;
  return false;
}

nlohmann::json HttpApi::model_json() const {
  return {{"id", model_id_},
          {"object", "model"},
          {"created", unix_seconds()},
          {"owned_by", "retnet"},
          {"meta",
           {{"parameters", model_.parameter_count()},
            {"state_bytes", model_.state_bytes_per_sequence()},
            {"vocab_size", model_.config().vocab_size}}}};
}

void HttpApi::install(GuardedServer& server) {
  server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    RequestNote& note = request_note();
    const double ms =
        std::chrono::duration<double, std::milli>(Clock::now() - GuardedServer::request_started())
            .count();
    const std::string line = access_log_line(req, res, note, ms, options_.log_prompts) + "\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
    note = RequestNote();
  });
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    request_note() = RequestNote();  // nothing left from a request the log did not see
    // Before anything else: no later step (a 404 naming the path, a JSON writer) sees such bytes.
    if (const std::string bad = invalid_utf8_in(req); !bad.empty()) {
      send_error(res, 400, fmt::format("the request is not valid UTF-8: {}", bad),
                 "invalid_request_error", "invalid_utf8");
      return httplib::Server::HandlerResponse::Handled;
    }
    // A browser app on an origin --cors-origin allows may call the API; its preflight (OPTIONS,
    // no key) is answered here, another origin's refused.
    const std::string origin = req.get_header_value("Origin");
    const bool cross_origin_allowed = !origin.empty() && cors_allows(origin);
    if (cross_origin_allowed) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    if (req.method == "OPTIONS") {
      if (!cross_origin_allowed) {
        send_error(res, 403,
                   origin.empty() ? std::string("OPTIONS is a CORS preflight: it needs an Origin")
                                  : fmt::format("cross-origin requests from '{}' are not allowed "
                                                "(the server's --cors-origin)",
                                                origin),
                   "invalid_request_error", "cors_origin_not_allowed");
        return httplib::Server::HandlerResponse::Handled;
      }
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
      return httplib::Server::HandlerResponse::Handled;
    }
    // The chat page holds no data (its requests carry the key the user types in), and a browser
    // cannot send a Bearer header when it loads a page.
    if (req.path == "/health" || req.path == "/")
      return httplib::Server::HandlerResponse::Unhandled;
    if (!authorized(req)) {
      send_error(res, 401, "Incorrect or missing API key: send it as \"Authorization: Bearer KEY\"",
                 "invalid_request_error", "invalid_api_key");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (stopping_) {
      send_error(res, 503, "the server is shutting down", "server_error", "shutting_down");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib answers itself (no route, body too large, bad request line) get a JSON body.
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (GuardedServer::request_timed_out())
          send_error(res, 408,
                     fmt::format("the request was not read whole within {} s (--read-timeout)",
                                 options_.read_timeout_s),
                     "invalid_request_error", "request_timeout");
        else if (res.status == 404)
          send_error(res, 404, fmt::format("no route for {} {}", req.method, req.path),
                     "invalid_request_error", "not_found");
        else if (res.status == 413)
          send_error(res, 413,
                     fmt::format("the request body is larger than the server's limit of {} MiB "
                                 "(--max-body-mib)",
                                 options_.max_body_mib),
                     "invalid_request_error", "body_too_large");
        else
          send_error(res, res.status, fmt::format("HTTP error {}", res.status),
                     res.status >= 500 ? "server_error" : "invalid_request_error");
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const HttpError& e) {
          send_error(res, e.status, e.what(), e.type, e.code, e.param);
        } catch (const Error& e) {
          send_error(res, 400, e.what(), "invalid_request_error");
        } catch (const std::exception& e) {
          send_error(res, 500, std::string("internal error: ") + e.what(), "server_error");
        }
      });

  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (stopping_)
      return send_error(res, 503, "the server is shutting down", "server_error", "shutting_down");
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  if (!options_.no_ui)
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const std::string_view page = chat_page_html();
      // The page's own inline script and style, and requests to this server only.
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
    });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(json_text(nlohmann::json({{"object", "list"}, {"data", {model_json()}}})),
                    "application/json");
  });
  // models.retrieve(): the served model by its id; another id is 404 (the list is the truth).
  server.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != model_id_)
      throw HttpError(404,
                      fmt::format("The model '{}' does not exist (this server has '{}')",
                                  std::string(req.matches[1]), model_id_),
                      "invalid_request_error", "model_not_found", "model");
    res.set_content(json_text(model_json()), "application/json");
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completions(req, res, false);
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completions(req, res, true);
  });
  server.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    embeddings(req, res);
  });
  server.Post("/tokenize",
              [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
  server.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    detokenize(req, res);
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.prometheus_text(), "text/plain; version=0.0.4");
  });
  server.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(json_text(props_json()), "application/json");
  });
  server.Get("/slots", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(json_text(scheduler_.slots_json()), "application/json");
  });
  server.Post(R"(/slots/(\d+))", [this](const httplib::Request& req, httplib::Response& res) {
    slot_action(req, res);
  });
}

// Encoding takes many times the text's bytes in memory, so text is measured before it is encoded.
void HttpApi::check_text_size(const std::string& text, const std::string& field) const {
  if (static_cast<int64_t>(text.size()) > options_.max_prompt_bytes)
    throw HttpError(413,
                    fmt::format("'{}' has {} bytes of text, more than the server's "
                                "--max-prompt-bytes {}",
                                field, text.size(), options_.max_prompt_bytes),
                    "invalid_request_error", "too_long", field);
}

std::shared_ptr<Job> HttpApi::make_job(const CompletionRequest& r) const {
  auto job = std::make_shared<Job>();
  std::string text;
  const char* field = r.chat ? "messages" : "prompt";
  if (r.chat) {
    ChatPrompt chat;
    try {
      chat = chat_.render(r.messages, r.structured.tools);
    } catch (const Error& e) {
      throw HttpError(400, e.what(), "invalid_request_error", "invalid_value", field);
    }
    text = chat.text;
    // The grammar ends structured output; a turn-end string inside a JSON string must not cut it.
    // Under tool_choice "auto" the reply may be prose, which the turn-end string ends (a call
    // that holds it is cut, and answered as text).
    if (r.structured.prose_may_stop()) job->stop = chat.stop;
  } else {
    text = r.prompt_text;
  }
  if (r.prompt_is_tokens) {
    job->prompt = r.prompt_tokens;
  } else {
    check_text_size(text, field);
    try {
      check_encodable(tokenizer_, text, field);
    } catch (const Error& e) {
      throw HttpError(400, e.what(), "invalid_request_error", "invalid_value", field);
    }
    job->prompt = tokenizer_.encode(text);
    // A completion's prompt starts with the BOS the tokenizer puts first, as `retnet generate`
    // does; a chat template writes its own.
    if (!r.chat && tokenizer_.adds_bos())
      job->prompt.insert(job->prompt.begin(), tokenizer_.bos_id());
  }
  if (options_.log_prompts)
    request_note().prompt_text = r.prompt_is_tokens ? tokenizer_.decode(job->prompt) : text;
  if (job->prompt.empty())
    throw HttpError(400, fmt::format("'{}' is empty: give some text to continue", field),
                    "invalid_request_error", "invalid_value", field);
  if (static_cast<int64_t>(job->prompt.size()) > options_.max_prompt_tokens)
    throw HttpError(400,
                    fmt::format("'{}' has {} tokens, more than the server's --max-prompt-tokens {}",
                                field, job->prompt.size(), options_.max_prompt_tokens),
                    "invalid_request_error", "context_length_exceeded", field);
  job->n = r.n;
  job->streamed = r.stream;
  job->choices.resize(static_cast<size_t>(r.n));
  job->sampling = r.sampling;
  if (!r.seed_given) job->sampling.seed = random_seed();
  job->max_tokens = r.max_tokens;
  job->stop.insert(job->stop.end(), r.stop.begin(), r.stop.end());
  job->stop_at_eos = !r.ignore_eos;
  job->top_logprobs = r.top_logprobs;
  job->logit_bias = r.logit_bias;
  job->grammar = r.structured.grammar;
  job->lookup = r.lookup >= 0 ? r.lookup : options_.lookup;
  job->draft_max = r.draft_max >= 0 ? r.draft_max : options_.draft_max;
  // A request that sets its own lookup (0: off) does not draft with the server's draft model.
  job->draft_model = !options_.draft_model.empty() && r.lookup < 0;
  job->deadline =
      Clock::now() + std::chrono::microseconds(static_cast<int64_t>(options_.timeout_s * 1e6));
  return job;
}

void HttpApi::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  const nlohmann::json body = parse_json_object(req.body);
  RequestLimits limits{options_.max_tokens, model_.config().vocab_size, options_.max_n,
                       options_.parallel};
  CompletionRequest r = parse_completion_request(body, chat, limits);
  // Read again with the key order kept: a schema's properties are written in their order.
  for (auto it = body.begin(); it != body.end(); ++it)
    if (is_structured_output_field(it.key(), chat)) {
      r.structured =
          parse_structured_output(parse_ordered_json(req.body, "the request body"), chat);
      break;
    }
  std::shared_ptr<Job> job = make_job(r);
  request_note().job = job;
  switch (scheduler_.submit(job)) {
    case Scheduler::Admission::Queued:
      break;
    case Scheduler::Admission::QueueFull:
      return send_error(res, 429,
                        fmt::format("the server is busy: every slot is taken and {} requests are "
                                    "waiting (--max-queue); retry later",
                                    options_.max_queue),
                        "rate_limit_exceeded", "queue_full");
    case Scheduler::Admission::ShuttingDown:
      return send_error(res, 503, "the server is shutting down", "server_error", "shutting_down");
  }
  ResponseContext ctx{response_id(chat), unix_seconds(), model_id_, chat,
                      static_cast<int64_t>(job->sampling.seed)};
  const bool with_logprobs = r.top_logprobs >= 0;

  if (!r.stream) {
    std::vector<std::string> texts(static_cast<size_t>(job->n));
    std::vector<std::vector<TokenLogprob>> logprobs(texts.size());
    Taken t;
    // Nothing is written until the end, so look at the socket while waiting: a client that left
    // frees its slots within a tenth of a second.
    int socket = GuardedServer::current_socket();
    if (socket < 0) socket = find_client_socket(req.remote_addr, req.remote_port, req.local_port);
    // Woken at the end only (and each tenth of a second), not by every token: on a small model
    // a wake-up per token takes a core from the decode steps.
    while (!t.finished) {
      t = take_output(*job, std::chrono::milliseconds(100), true);
      for (size_t i = 0; i < texts.size(); ++i) {
        texts[i] += t.choices[i].text;
        logprobs[i].insert(logprobs[i].end(), t.choices[i].logprobs.begin(),
                           t.choices[i].logprobs.end());
      }
      if (!t.finished && socket >= 0 && client_gone(socket)) {
        job->cancelled = true;  // the inference thread frees the slots; no one is left to answer
        return;
      }
    }
    if (!t.error.empty())
      return send_error(res, t.error_status, t.error,
                        t.error_status == 504 ? "timeout_error" : "server_error");
    std::vector<ChoiceResult> choices;
    for (size_t i = 0; i < texts.size(); ++i) {
      int64_t offset = 0;
      choices.push_back({texts[i], t.choices[i].finish_reason,
                         with_logprobs ? logprobs_json(logprobs[i], tokenizer_, chat, &offset)
                                       : nlohmann::json()});
    }
    nlohmann::json reply = completion_json(ctx, choices, t.usage);
    reply["timings"] = timings_json(t.timings);
    for (size_t i = 0; i < texts.size(); ++i)
      if (reply_is_call(r.structured, texts[i], choices[i].finish_reason)) {  // else the text
        nlohmann::json& choice = reply["choices"][i];
        choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(texts[i], false);
        choice["finish_reason"] = "tool_calls";
      }
    res.set_content(json_text(reply), "application/json");
    return;
  }

  // Streaming: per choice, one SSE chunk per batch of released text, then its finish chunk; then
  // the usage chunk (if asked) and [DONE].
  struct ChoiceStream {
    bool first = true, ended = false;
    int64_t offset = 0;
    std::string call;  // a tool call's text, sent whole as delta.tool_calls when it is complete
    int holding = -1;  // whether the reply is held back as a call; -1: no text yet
  };
  struct StreamState {
    bool done = false;
    std::vector<ChoiceStream> choices;
    Clock::time_point next_write{};  // chunks at most one per kStreamChunkInterval
  };
  auto state = std::make_shared<StreamState>();
  state->choices.resize(static_cast<size_t>(job->n));
  const bool include_usage = r.include_usage;
  StructuredOutput calls;  // what makes a reply a call (the rest of r.structured is not needed)
  calls.call = r.structured.call;
  calls.tool_call = r.structured.tool_call;
  res.set_header("Cache-Control", "no-cache");
  open_streams_ += 1;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, ctx, state, with_logprobs, include_usage, calls](size_t,
                                                                   httplib::DataSink& sink) {
        if (state->done) return false;
        // Tokens that come faster than one per interval go out together: a write and a wake-up
        // per token would take a core from the decode steps of a small model.
        std::this_thread::sleep_until(state->next_write);
        Taken t = take_output(*job, std::chrono::milliseconds(500));
        std::string out;
        for (size_t i = 0; i < t.choices.size(); ++i) {
          ChoiceOutput& c = t.choices[i];
          ChoiceStream& cs = state->choices[i];
          const auto index = static_cast<int64_t>(i);
          if (calls.call) {
            // Under "auto" a reply is held back as a call when it starts with '{'; one that
            // does not end as a whole call is sent as text.
            if (cs.holding < 0 && !c.text.empty()) cs.holding = calls.tool_call || c.text[0] == '{';
            if (cs.holding == 1) {
              cs.call += c.text;
              c.text.clear();
              if (c.finished && !reply_is_call(calls, cs.call, c.finish_reason))
                c.text.swap(cs.call);
            }
          }
          if (!c.text.empty() || !c.logprobs.empty() || (cs.first && ctx.chat)) {
            nlohmann::json lp = with_logprobs
                                    ? logprobs_json(c.logprobs, tokenizer_, ctx.chat, &cs.offset)
                                    : nlohmann::json();
            out += sse(chunk_json(ctx, c.text, cs.first, nullptr, lp, index));
            cs.first = false;
          }
          if (!c.finished || cs.ended || !t.error.empty()) continue;
          cs.ended = true;
          std::string reason = c.finish_reason;
          if (cs.holding == 1 && !cs.call.empty()) {
            nlohmann::json call = chunk_json(ctx, "", false, nullptr, nullptr, index);
            call["choices"][0]["delta"]["tool_calls"] = tool_calls_json(cs.call, true);
            out += sse(call);
            reason = "tool_calls";
          }
          nlohmann::json last = chunk_json(ctx, "", false, reason, nullptr, index);
          last["timings"] = timings_json(t.timings);
          out += sse(last);
        }
        if (t.finished) {
          if (!t.error.empty())
            out += sse(error_json(t.error, "server_error", "generation_ended"));
          else if (include_usage)
            out += sse(usage_chunk_json(ctx, t.usage));
          out += "data: [DONE]\n\n";
        }
        // A failed write means the client went away: free its slots now.
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          job->cancelled = true;
          return false;
        }
        if (t.finished) {
          state->done = true;
          sink.done();
        }
        state->next_write = Clock::now() + kStreamChunkInterval;
        return true;
      },
      [this, job](bool success) {
        if (!success) job->cancelled = true;
        open_streams_ -= 1;
      });
}

}  // namespace retnet::server
