// The server's scheduler with structured output: a grammar the vocabulary cannot spell ends its
// own request with an error, while the requests decoding beside it go on.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "retnet/infer/json_schema.h"
#include "retnet/model/config.h"
#include "retnet/model/model.h"
#include "scheduler.h"

namespace retnet::server {
namespace {

// Bytes, but '{' has no token: no JSON object can be written.
class NoBraceBytes : public Tokenizer {
 public:
  std::string kind() const override { return "test"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string token_bytes(int32_t id) const override {
    return id == '{' ? "" : std::string(1, static_cast<char>(id));
  }
  std::string serialize() const override { return ""; }
};

std::shared_ptr<Job> structured_test_job(std::shared_ptr<const Grammar> grammar) {
  auto job = std::make_shared<Job>();
  job->prompt = {'h', 'i'};
  job->max_tokens = 6;
  job->sampling.temperature = 0;
  job->grammar = std::move(grammar);
  job->deadline = Clock::now() + std::chrono::seconds(300);
  return job;
}

TEST(ServerStructured, AGrammarTheVocabularyCannotSpellEndsOnlyItsRequest) {
  const Model m = Model::init(Config::from_json(R"({"decoder_embed_dim": 32,
    "decoder_value_embed_dim": 32, "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 32,
    "decoder_layers": 2, "vocab_size": 256})"),
                              4);
  NoBraceBytes tok;
  Metrics metrics;
  SchedulerOptions options;
  options.slots = 2;
  Scheduler scheduler(m, tok, options, metrics);
  auto plain = structured_test_job(nullptr);
  auto object = structured_test_job(json_object_grammar());
  ASSERT_EQ(scheduler.submit(plain), Scheduler::Admission::Queued);
  ASSERT_EQ(scheduler.submit(object), Scheduler::Admission::Queued);
  for (const auto& job : {plain, object}) {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->changed.wait(lock, [&] { return job->finished; });  // no time limit: it must end
  }
  EXPECT_EQ(object->error_status, 500);
  EXPECT_NE(object->error.find("structured output failed"), std::string::npos) << object->error;
  EXPECT_TRUE(plain->error.empty()) << plain->error;
  EXPECT_EQ(plain->choices[0].finish_reason, "length");
  EXPECT_EQ(plain->choices[0].completion_tokens, 6);
}

}  // namespace
}  // namespace retnet::server
