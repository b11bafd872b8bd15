// `retnet serve`: an OpenAI-compatible HTTP server over one model, with continuous batching on
// one inference thread (scheduler.h), a prompt cache of recurrent states, metrics and limits.
// This file registers the options; serve_main.cpp runs the server.
#include "commands.h"
#include "serve_main.h"

namespace retnet::cli {

void register_serve(CLI::App& app) {
  auto o = std::make_shared<server::ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve a model over HTTP with OpenAI's API: continuous batching, a prompt cache of "
      "recurrent states, metrics");
  cmd->footer(
      "Structured output: requests may set response_format {\"type\": \"json_object\"} or "
      "\"json_schema\" (a JSON Schema subset), or tools with tool_choice \"required\" or a "
      "named function; sampling is masked token by token so the reply parses and validates "
      "(docs/server.md).");
  add_model_options(cmd, o->model, o->config);
  add_backend_option(cmd, o->backend);
  cmd->add_option("--alias", o->alias, "Model id clients name (default: the model's file name)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  add_checked(cmd, "--port", o->port, "Port to listen on", integer_within(1, 65535));
  add_checked(cmd, "--parallel", o->parallel, "Slots: streams decoded together",
              integer_within(1, 4096));
  add_threads_option(cmd, o->threads, "Threads (default: all cores; small models decode on one)");
  cmd->add_option("--api-key", o->api_keys,
                  "Require 'Authorization: Bearer KEY' on every endpoint but /health "
                  "(repeatable)");
  cmd->add_option("--api-key-file", o->api_key_file, "Read API keys from a file, one per line");
  add_checked(cmd, "--max-prompt-tokens", o->max_prompt_tokens, "Refuse longer prompts",
              integer_within(1, int64_t{1} << 30));
  add_checked(cmd, "--max-prompt-bytes", o->max_prompt_bytes,
              "Refuse longer text to encode (prompts, rendered chats, /tokenize content) and "
              "longer /detokenize lists, before tokenizing (413)",
              integer_within(1, int64_t{1} << 30));
  add_checked(cmd, "--max-tokens,-n", o->max_tokens,
              "Most tokens a request may generate (and the default); a request asking more is "
              "clamped to it and ends with finish_reason \"length\"",
              integer_within(0, int64_t{1} << 40));
  add_checked(cmd, "--max-n", o->max_n,
              "Most choices (n) a request may ask for; each takes a slot, so n is also at most "
              "--parallel (the prompt is read once and its state copied)",
              integer_within(1, 4096));
  add_checked(cmd, "--max-queue", o->max_queue, "Requests waiting for a slot before 429",
              integer_within(0, 1 << 20));
  add_checked(cmd, "--timeout", o->timeout_s, "Seconds a request may take, queue included",
              number_within(0.001, 1e7));
  add_checked(cmd, "--read-timeout", o->read_timeout_s,
              "Seconds to read one whole request, headers and body, on every request of a "
              "connection (a slower client is disconnected)",
              number_within(0.001, 1e7));
  add_checked(cmd, "--max-connections", o->max_connections,
              "Open connections (one thread each, started on demand); past it a new connection "
              "gets 503",
              integer_within(1, 1 << 16));
  add_checked(cmd, "--max-connections-per-client", o->max_connections_per_client,
              "Open connections from one client address; past it a new one gets 429",
              integer_within(1, 1 << 16));
  add_checked(cmd, "--state-cache-mib", o->state_cache_mib,
              "Prompt cache of sequence states, MiB (0: off)", integer_within(0, int64_t{1} << 30));
  cmd->add_option("--cache-dir", o->cache_dir,
                  "Also keep the prompt cache's states in files here (made if missing), so that "
                  "they serve requests after a restart; files of other models are left alone, "
                  "damaged ones skipped");
  add_checked(cmd, "--cache-dir-mib", o->cache_dir_mib,
              "Bound of --cache-dir's files, MiB (least recently used removed first)",
              integer_within(1, int64_t{1} << 30));
  cmd->add_option("--cache-type", o->cache_type,
                  "Prompt cache states, in memory and in --cache-dir files, as f32 (exact) or "
                  "bf16 (half the bytes; a restored state is rounded to 8 significant bits, so "
                  "text may drift); files of either kind are read")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  add_checked(cmd, "--max-body-mib", o->max_body_mib, "Largest request body, MiB",
              integer_within(1, 1024));
  add_checked(cmd, "--prefill-block", o->prefill_block,
              "Prompt tokens read between two decode steps (rounded to whole chunks)",
              integer_within(1, int64_t{1} << 30));
  const CLI::Validator batch_count = integer_within(0, 1 << 20);
  // Read once here: "auto" becomes kPrefillBatchAuto.
  cmd->add_option_function<std::string>(
         "--prefill-batch",
         [o](const std::string& s) {
           o->prefill_batch = s == "auto" ? server::kPrefillBatchAuto : std::stoll(s);
         },
              "Prompts read together in one batched pass (every projection one product over all "
              "their tokens): auto (while a pass holds under 2^32 multiply-adds, tokens x "
              "parameters: a small model's prompts together, a large one's one a pass), or at "
              "most N (0: all that the --prefill-block allows, 1: one prompt a pass); see "
              "docs/server.md")
      ->check(CLI::Validator(
          [batch_count](std::string& s) { return s == "auto" ? std::string() : batch_count(s); },
          "auto or N"))
      ->default_str("auto");
  add_checked(cmd, "--lookup", o->lookup,
              "Speculative decoding with prompt lookup for every request: draft the tokens that "
              "followed the latest earlier occurrence of a stream's last (up to N) tokens, check "
              "them in one pass beside the batched step, keep what decoding would pick anyway "
              "(same text; 0: off; a request's \"speculative\" object overrides it)",
              integer_within(0, 64));
  add_checked(cmd, "--draft-max", o->draft_max,
              "Most tokens drafted for one check with --lookup or --draft-model (the count adapts "
              "per stream: "
              "grows while drafts are kept, pauses drafting while they are not)",
              integer_within(1, 64));
  cmd->add_option("--draft-model", o->draft_model,
                  "Speculative decoding with a draft model for every request (same vocabulary "
                  "and tokenizer, loaded with --dtype): it drafts a stream's next tokens, one "
                  "pass checks them beside the batched step, and the stream keeps what decoding "
                  "would pick anyway (same text; not with --lookup; a request's \"speculative\" "
                  "lookup overrides it)");
  add_checked(cmd, "--lookup-max-streams", o->lookup_max_streams,
              "Speculate only while at most this many streams decode: with more, one batched "
              "step already reads the weights once for all of them, and each stream's check "
              "pass would read them again",
              integer_within(1, 1 << 20));
  cmd->add_option("--slot-save-dir", o->slot_save_dir,
                  "Enable POST /slots/{id}?action=save|restore with files in this directory");
  cmd->add_option("--chat-template", o->chat_template_file,
                  "Jinja chat template for /v1/chat/completions (default: the model directory's "
                  "tokenizer_config.json chat_template, else the default template; see "
                  "docs/chat-templates.md)");
  cmd->add_option("--dtype", o->dtype,
                  "Weights inference reads: f32 (exact), bf16 or f16 (half the bytes per token), "
                  "q8_0, q4_1 or q4_0 (quantised at load); a quantised file is used in its type")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0", "q4_0", "q4_1"}))
      ->capture_default_str();
  cmd->add_flag("--no-ui", o->no_ui, "No chat page at / (404)");
  cmd->add_flag("--log-prompts", o->log_prompts,
                "Write each generation request's prompt text (JSON-escaped) on its access-log "
                "line; without it the log holds token counts only");
  cmd->add_option("--cors-origin", o->cors_origins,
                  "Let a browser app on this origin (e.g. http://localhost:3000; repeatable; \"*\": "
                  "any) call the API: CORS headers and preflight answers (requests still need "
                  "the API key, if set)");
  cmd->add_flag("--reuse-port", o->reuse_port,
                "Let several servers listen on the same port (SO_REUSEPORT; the kernel spreads "
                "connections among them); without it a port in use stops the server at start");
  cmd->callback([o] { server::run_server(*o); });
}

}  // namespace retnet::cli
