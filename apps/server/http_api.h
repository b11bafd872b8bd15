#pragma once
// The HTTP side of `retnet serve`: routes, API-key checks, request validation, tokenization and
// OpenAI-shaped responses (JSON, or SSE streams). Generation itself is queued to the Scheduler.
#include <httplib.h>

#include <atomic>
#include <string>

#include "chat_prompt.h"
#include "guarded_server.h"
#include "metrics.h"
#include "openai_request.h"
#include "scheduler.h"
#include "serve_options.h"

namespace retnet::server {

class HttpApi {
 public:
  HttpApi(const ServeOptions& options, const std::string& model_id, const Model& model,
          const Tokenizer& tokenizer, const ChatFormatter& chat, Scheduler& scheduler,
          Metrics& metrics);
  // Registers every route and handler on `server`.
  void install(GuardedServer& server);
  // From now on, new requests get 503 (the server is shutting down).
  void stop_accepting() { stopping_ = true; }
  // Streams still writing to their clients.
  int64_t open_streams() const { return open_streams_; }

 private:
  bool authorized(const httplib::Request& req) const;
  void send_error(httplib::Response& res, int status, const std::string& message,
                  const std::string& type, const std::string& code = "",
                  const std::string& param = "");
  void completions(const httplib::Request& req, httplib::Response& res, bool chat);
  void check_text_size(const std::string& text, const std::string& field) const;
  std::shared_ptr<Job> make_job(const CompletionRequest& r) const;
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  // POST /v1/embeddings (http_api_embeddings.cpp).
  void embeddings(const httplib::Request& req, httplib::Response& res);
  void slot_action(const httplib::Request& req, httplib::Response& res);
  nlohmann::json props_json() const;  // GET /props: the server's settings
  nlohmann::json model_json() const;  // the served model, as /v1/models lists it
  bool cors_allows(const std::string& origin) const;  // --cors-origin

  const ServeOptions& options_;
  std::string model_id_;
  const Model& model_;
  const Tokenizer& tokenizer_;
  const ChatFormatter& chat_;
  Scheduler& scheduler_;
  Metrics& metrics_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> open_streams_{0};
};

}  // namespace retnet::server
