#pragma once
// Options of `retnet serve`.
#include <cstdint>
#include <string>
#include <vector>

namespace retnet::server {

// --prefill-batch auto: prompts share a pass while it is small (SchedulerOptions::prefill_batch).
inline constexpr int64_t kPrefillBatchAuto = -1;

struct ServeOptions {
  std::string model, config, alias;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t parallel = 4;
  int threads = 0;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  int64_t max_prompt_tokens = 8192;
  int64_t max_prompt_bytes = 1 << 20;  // text a request may ask to encode
  double read_timeout_s = 15;          // to read one whole request, headers and body
  int64_t max_connections = 256;
  int64_t max_connections_per_client = 64;
  int64_t max_tokens = 512;
  int64_t max_n = 8;  // choices a request may ask for (n)
  int64_t max_queue = 64;
  double timeout_s = 600;
  int64_t state_cache_mib = 64;
  std::string cache_dir;         // the prompt cache's disk tier ("": none)
  int64_t cache_dir_mib = 1024;  // its bound
  std::string cache_type = "f32";  // the memory tier's states: f32 or bf16 (half the bytes)
  int64_t max_body_mib = 8;
  int64_t prefill_block = 512;
  int64_t prefill_batch = kPrefillBatchAuto;  // prompts per batched pass, or a count (0: no limit)
  // Speculative decoding with prompt lookup (lookup 0: off).
  int64_t lookup = 0, draft_max = 8;
  int64_t lookup_max_streams = 1;  // speculate only while at most this many streams decode
  std::string draft_model;  // speculative decoding with this draft model ("": none)
  std::string slot_save_dir;
  std::string chat_template_file;  // empty: the model directory's, else the default
  std::string dtype = "f32";       // the inference copy of the weights: f32, bf16, f16
  std::string backend = "cpu";     // what the model's passes run on (Model::use_backend)
  bool no_ui = false;              // no chat page at /
  bool log_prompts = false;        // the access log shows each prompt's text
  bool reuse_port = false;         // SO_REUSEPORT: servers share the port
  std::vector<std::string> cors_origins;  // origins a browser app may call from ("*": any)
};

}  // namespace retnet::server
