// Pieces of `retnet serve` that need no HTTP: the prompt cache (longest prefix, LRU eviction within
// its byte budget), the request validation (each bad field named), the chat templates, and how a
// handler notices that its client left.
// The server end to end is tested by tests/server/.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "chat_prompt.h"
#include "client_socket.h"
#include "openai_request.h"
#include "openai_response.h"
#include "prompt_cache.h"
#include "retnet/core/error.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::server;

namespace {

SavedSequence state_of(int64_t position, size_t floats) {
  SavedSequence s;
  s.position = position;
  s.state.assign(floats, static_cast<float>(position));
  return s;
}

TEST(ServerPromptCache, FindsTheLongestCachedPrefix) {
  PromptCache cache(1 << 20);
  cache.insert({1, 2}, state_of(2, 4));
  cache.insert({1, 2, 3, 4}, state_of(4, 4));
  cache.insert({1, 9, 9}, state_of(3, 4));
  int64_t n = -1;
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  const SavedSequence* hit = cache.find_longest_prefix(prompt, &n);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(n, 4);
  EXPECT_EQ(hit->position, 4);
  const std::vector<int32_t> shorter = {1, 2, 3};
  hit = cache.find_longest_prefix(shorter, &n);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(n, 2);  // {1, 2, 3, 4} is longer than the prompt
  const std::vector<int32_t> other = {7, 1, 2};
  EXPECT_EQ(cache.find_longest_prefix(other, &n), nullptr);
  EXPECT_EQ(n, 0);
}

TEST(ServerPromptCache, EvictsTheLeastRecentlyUsedWithinItsBudget) {
  PromptCache probe(1 << 20);
  probe.insert({1}, state_of(1, 1000));
  const int64_t one = probe.bytes();
  PromptCache cache(3 * one);  // room for three entries of this size
  cache.insert({1}, state_of(1, 1000));
  cache.insert({2}, state_of(1, 1000));
  cache.insert({3}, state_of(1, 1000));
  int64_t n = 0;
  const std::vector<int32_t> first = {1, 5};
  ASSERT_NE(cache.find_longest_prefix(first, &n), nullptr);  // {1} becomes the most recent
  cache.insert({4}, state_of(1, 1000));                      // evicts {2}
  EXPECT_EQ(cache.entries(), 3);
  EXPECT_LE(cache.bytes(), cache.capacity_bytes());
  const std::vector<int32_t> second = {2};
  EXPECT_EQ(cache.find_longest_prefix(second, &n), nullptr);
  EXPECT_NE(cache.find_longest_prefix(first, &n), nullptr);
  // Re-inserting a key replaces it; a state larger than the budget is not kept.
  cache.insert({1}, state_of(1, 1000));
  EXPECT_EQ(cache.entries(), 3);
  cache.insert({9}, state_of(1, 10000));
  EXPECT_EQ(cache.entries(), 3);
  const std::vector<int32_t> big = {9};
  EXPECT_EQ(cache.find_longest_prefix(big, &n), nullptr);
}

RequestLimits limits() { return {100, 256}; }

// The status and the param of the HttpError a body raises (0 and "" when accepted).
std::pair<int, std::string> refusal(const std::string& body, bool chat = false) {
  try {
    parse_completion_request(parse_json_object(body), chat, limits());
  } catch (const HttpError& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
    return {e.status, e.param};
  }
  return {0, ""};
}

TEST(ServerRequest, NamesTheBadField) {
  EXPECT_EQ(refusal(R"({"prompt": "x"})").first, 0);
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": "hot"})"),
            std::make_pair(400, std::string("temperature")));
  EXPECT_EQ(refusal(R"({"prompt": "x", "temperature": 3})").second, "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": -1})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "max_tokens": 1.5})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "x", "n": 2})").second, "n");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stop": ["a", 3]})").second, "stop[1]");
  EXPECT_EQ(refusal(R"({"prompt": [1, 300]})").second, "prompt[1]");
  // One model is served whatever the request names (clients insist on names such as gpt-4o).
  EXPECT_EQ(refusal(R"({"prompt": "x", "model": "gpt-4o"})"), std::make_pair(0, std::string()));
  EXPECT_EQ(refusal(R"({"prompt": "x", "model": 4})").second, "model");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream": 1})").second, "stream");
  EXPECT_EQ(refusal(R"({"messages": []})", true).second, "messages");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": 1}]})", true).second,
            "messages[0].content");
  EXPECT_EQ(refusal(R"({"messages": [{"content": "x"}]})", true).second, "messages[0].role");
  EXPECT_EQ(refusal(R"({"prompt": "x", "logprobs": 21})").second, "logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "x"})", true).second, "messages");
}

// A field the server does not implement would change the output if honoured: it is refused by
// name, never ignored.
TEST(ServerRequest, RefusesFieldsItDoesNotImplementByName) {
  for (const char* field :
       {"top_a", "typical_p", "mirostat", "functions", "cache_prompt", "best_of"}) {
    const std::string body = fmt::format(R"({{"prompt": "x", "{}": 1}})", field);
    EXPECT_EQ(refusal(body), std::make_pair(400, std::string(field))) << body;
    const std::string chat =
        fmt::format(R"({{"messages": [{{"role": "user", "content": "x"}}], "{}": 1}})", field);
    EXPECT_EQ(refusal(chat, true), std::make_pair(400, std::string(field))) << chat;
  }
  // Each endpoint's own fields belong to it alone (structured_output.h reads the chat's tools).
  for (const char* field : {"tools", "tool_choice", "parallel_tool_calls"}) {
    const std::string body = fmt::format(R"({{"prompt": "x", "{}": 1}})", field);
    EXPECT_EQ(refusal(body), std::make_pair(400, std::string(field))) << body;
  }
  EXPECT_EQ(refusal(R"({"prompt": "x", "messages": []})").second, "messages");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "x"}], "echo": false})", true)
                .second,
            "echo");
  EXPECT_EQ(refusal(R"({"prompt": "x", "stream_options": {"include_usage": true, "x": 1}})")
                .second,
            "stream_options.x");
  EXPECT_EQ(
      refusal(R"({"messages": [{"role": "user", "content": "x", "name": "bob"}]})", true).second,
      "messages[0].name");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "assistant"}]})", true).second,
            "messages[0].content");
  // What the server reads is accepted, null included.
  EXPECT_EQ(refusal(R"({"prompt": "x", "user": "u", "seed": null, "top_k": 5, "stop": "."})")
                .first,
            0);
}

TEST(ServerRequest, NumbersPastTheFieldsRangeNameTheField) {
  // Whole numbers past 64 bits parse as doubles; 1e400 does not parse at all.
  for (const auto& [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "x", "max_tokens": 1e400})", "max_tokens"},
           {R"({"prompt": "x", "max_tokens": 1e20})", "max_tokens"},
           {R"({"prompt": "x", "n": 1e300})", "n"},
           {R"({"prompt": "x", "seed": 1180591620717411303424})", "seed"},
           {R"({"prompt": "x", "seed": 18446744073709551615})", "seed"},
           {R"({"prompt": "x", "top_k": 1e30})", "top_k"},
           {R"({"prompt": "x", "temperature": -1e308})", "temperature"},
           {R"({"prompt": "x", "logit_bias": {"99999999999999999999": 1}})",
            "logit_bias.99999999999999999999"},
           {R"({"prompt": "x", "logit_bias": {"-1": 0}})", "logit_bias.-1"},
           {R"({"prompt": "x", "logit_bias": {"1": 1e300}})", "logit_bias.1"},
           {R"({"prompt": "x", "logit_bias": {"1": 101}})", "logit_bias.1"}}) {
    const auto [status, param] = refusal(body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_EQ(param, field) << body;
  }
  EXPECT_EQ(refusal(R"({"prompt": "x", "logit_bias": {"1": 0, "2": -100, "3": 5.5}})").first, 0);
}

TEST(ServerResponse, JsonTextNeverThrowsOnInvalidUtf8) {
  const nlohmann::json j = {{"message", std::string("no route for GET /\xff\xfe")}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::exception);
  const std::string text = json_text(j);
  EXPECT_NE(text.find("/\xEF\xBF\xBD"), std::string::npos) << text;  // U+FFFD
}

TEST(ServerRequest, ReadsFieldsAndDefaults) {
  auto r = parse_completion_request(
      parse_json_object(R"({"prompt": ["hi"], "max_tokens": 7, "temperature": 0, "top_k": 3,
                            "stop": "x", "seed": 5, "logprobs": 2, "stream": true,
                            "stream_options": {"include_usage": true}})"),
      false, limits());
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.sampling.seed, 5u);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
  auto d = parse_completion_request(parse_json_object(R"({"prompt": [5, 6]})"), false, limits());
  EXPECT_TRUE(d.prompt_is_tokens);
  EXPECT_EQ(d.prompt_tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(d.max_tokens, 100);  // the server's --max-tokens
  EXPECT_FALSE(d.seed_given);
  // More than the server allows is clamped to its --max-tokens, under either name.
  for (const char* body : {R"({"prompt": "x", "max_tokens": 1000})",
                           R"({"messages": [{"role": "user", "content": "x"}],
                               "max_completion_tokens": 1000})"}) {
    const bool chat = std::string(body).find("messages") != std::string::npos;
    EXPECT_EQ(parse_completion_request(parse_json_object(body), chat, limits()).max_tokens, 100)
        << body;
  }
}

TEST(ServerRequest, RefusesBodiesThatAreNotJsonObjects) {
  for (const std::string& body :
       {std::string("{\"prompt\": "), std::string("[1]"), std::string("{\"prompt\": \"\xff\"}")}) {
    try {
      parse_json_object(body);
      ADD_FAILURE() << "accepted " << body;
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400);
    }
  }
}

TEST(ServerChatPrompt, DefaultTemplate) {
  const ChatFormatter chat(load_chat_template(""));
  ChatPrompt p = chat.render(
      {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}});
  EXPECT_EQ(p.text,
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n"
            "<|user|>\nBye<|end|>\n<|assistant|>\n");
  EXPECT_EQ(p.stop, std::vector<std::string>{"<|end|>"});
}

// An assistant's tool calls and a tool's result in the history: the default template shows the
// call as the model writes it (arguments in the order sent); a Hugging Face template reads
// tool_calls with arguments as an object.
TEST(ServerChatPrompt, ToolCallsAndResultsRenderThroughTheTemplate) {
  const nlohmann::json body = nlohmann::json::parse(R"({"messages": [
      {"role": "user", "content": "1 + 2?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
       "function": {"name": "add", "arguments": "{\"b\": 2, \"a\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "3"}]})");
  const CompletionRequest r = parse_completion_request(body, true, {16, 256});
  EXPECT_EQ(ChatFormatter(load_chat_template("")).render(r.messages).text,
            "<|user|>\n1 + 2?<|end|>\n<|assistant|>\n{\"name\":\"add\",\"arguments\":{\"b\":2,"
            "\"a\":1}}<|end|>\n<|tool|>\n3<|end|>\n<|assistant|>\n");
  const ChatFormatter hf(
      {"{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.name "
       "}}{{ m.tool_calls[0].function.arguments | tojson }}{% else %}{{ m.role }}:"
       "{{ m.content }}{% endif %};{% endfor %}",
       "test", "", ""});
  EXPECT_EQ(hf.render(r.messages).text, "user:1 + 2?;add{\"b\": 2, \"a\": 1};tool:3;");
  auto with = [](const char* message) {
    return fmt::format(R"({{"messages": [{{"role": "user", "content": "x"}}, {}]}})", message);
  };
  EXPECT_EQ(refusal(with(R"({"role": "user", "content": "x", "tool_call_id": "c"})"), true).second,
            "messages[1].tool_call_id");
  EXPECT_EQ(refusal(with(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f",
            "arguments": "{"}}]})"),
                    true)
                .second,
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(refusal(with(R"({"role": "assistant", "tool_calls": []})"), true).second,
            "messages[1].tool_calls");
  EXPECT_EQ(refusal(with(R"({"role": "tool", "tool_call_id": "c"})"), true).second,
            "messages[1].content");
}

// A model directory's template (tokenizer_config.json) with its BOS and EOS; a template's
// raise_exception is an Error naming it.
TEST(ServerChatPrompt, ModelDirectoryTemplateWithSpecialTokens) {
  const auto dir = test::fresh_temp_dir("chat_formatter");
  const nlohmann::json config = {
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
      {"chat_template",
       "{{ bos_token }}{% for m in messages %}{% if m.role == 'system' %}"
       "{{ raise_exception('no system role') }}{% endif %}[{{ m.role }}] {{ m.content }}"
       "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  const ChatFormatter chat(load_chat_template(dir.string()));
  const ChatPrompt p = chat.render({{"user", "Hi"}});
  EXPECT_EQ(p.text, "<s>[user] Hi</s>[assistant] ");
  EXPECT_EQ(p.stop, std::vector<std::string>{"</s>"});
  try {
    chat.render({{"system", "x"}});
    ADD_FAILURE() << "raise_exception was not an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no system role"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// A loopback connection: the server's accepted socket is found by the client's address and port,
// counts as present while the client is connected (and while a pipelined request waits unread),
// and as gone once the client closes.
TEST(ServerClientSocket, FindsTheConnectionAndSeesTheClientLeave) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int server_port = ntohs(address.sin_port);

  const int client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  sockaddr_in client_address{};
  length = sizeof(client_address);
  ASSERT_EQ(getsockname(client, reinterpret_cast<sockaddr*>(&client_address), &length), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);

  const int client_port = ntohs(client_address.sin_port);
  EXPECT_EQ(find_client_socket("127.0.0.1", client_port, server_port), accepted);
  EXPECT_EQ(find_client_socket("127.0.0.1", client_port, server_port + 1), -1);
  EXPECT_EQ(find_client_socket("127.0.0.2", client_port, server_port), -1);
  EXPECT_FALSE(client_gone(accepted));
  ASSERT_EQ(send(client, "GET", 3, 0), 3);
  EXPECT_FALSE(client_gone(accepted));  // data waiting is a client still there
  char buffer[3];
  ASSERT_EQ(recv(accepted, buffer, 3, 0), 3);
  close(client);
  bool gone = false;  // loopback delivers the close at once; allow a moment under load
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = client_gone(accepted);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(gone);
  close(accepted);
  close(listener);
}

}  // namespace
