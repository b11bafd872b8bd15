// The server's scheduler with n > 1: the prompt is read once and its state forked, and choice i is
// the text a session gives the prompt alone with random stream i.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "retnet/infer/decoder.h"
#include "retnet/model/config.h"
#include "retnet/model/model.h"
#include "scheduler.h"

namespace retnet::server {
namespace {

Model tiny_model() {
  return Model::init(Config::from_json(R"({"decoder_embed_dim": 32,
    "decoder_value_embed_dim": 32, "decoder_retention_heads": 2, "decoder_ffn_embed_dim": 32,
    "decoder_layers": 2, "vocab_size": 256, "recurrent_chunk_size": 4})"),
                     9);
}

std::shared_ptr<Job> choices_job(int64_t n, float temperature) {
  auto job = std::make_shared<Job>();
  job->prompt = {'O', 'n', 'c', 'e', ' ', 'u', 'p', 'o', 'n', ' ', 'a'};
  job->n = n;
  job->choices.resize(static_cast<size_t>(n));
  job->max_tokens = 12;
  job->stop_at_eos = false;
  job->sampling.temperature = temperature;
  job->sampling.seed = 31;
  job->deadline = Clock::now() + std::chrono::seconds(300);
  return job;
}

void wait_finished(Job& job) {
  std::unique_lock<std::mutex> lock(job.mutex);
  job.changed.wait(lock, [&] { return job.finished; });  // no time limit: it must end
}

// The prompt alone in a fresh session, decoded with random stream `stream`.
std::string alone(const Model& model, const Tokenizer& tokenizer, const Job& job, uint64_t stream) {
  Session session(model);
  session.add_sequence();
  session.prefill(0, job.prompt.data(), static_cast<int64_t>(job.prompt.size()));
  DecodeRule rule;
  rule.sampling = job.sampling;
  rule.max_tokens = job.max_tokens;
  rule.stop_at_eos = false;
  rule.stream = stream;
  SequenceDecoder decoder(tokenizer, rule);
  std::string text;
  for (;;) {
    const SequenceDecoder::Next next = decoder.next(session, 0);
    text += next.text;
    if (next.finish != FinishReason::None) break;
    session.step(&next.token);
  }
  return text + decoder.finish(nullptr);
}

// A scheduler of `slots` slots over the tiny model, without a prompt cache.
struct ChoicesServer {
  explicit ChoicesServer(int64_t slots) {
    options.slots = slots;
    options.cache_bytes = 0;
  }
  const Model model = tiny_model();
  const std::unique_ptr<Tokenizer> tokenizer = make_byte_tokenizer();
  Metrics metrics;
  SchedulerOptions options;
};

TEST(ServerChoices, EachChoiceIsThePromptAloneWithItsOwnStream) {
  ChoicesServer server(4);
  const Model& model = server.model;
  const auto& tokenizer = server.tokenizer;
  Metrics& metrics = server.metrics;
  Scheduler scheduler(model, *tokenizer, server.options, metrics);
  auto sampled = choices_job(3, 1.0F);
  auto greedy = choices_job(2, 0.0F);
  ASSERT_EQ(scheduler.submit(sampled), Scheduler::Admission::Queued);
  ASSERT_EQ(scheduler.submit(greedy), Scheduler::Admission::Queued);  // waits for 2 idle slots
  wait_finished(*sampled);
  wait_finished(*greedy);
  ASSERT_TRUE(sampled->error.empty()) << sampled->error;
  ASSERT_TRUE(greedy->error.empty()) << greedy->error;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(sampled->choices[i].text, alone(model, *tokenizer, *sampled, i)) << "choice " << i;
    EXPECT_EQ(sampled->choices[i].finish_reason, "length");
    EXPECT_EQ(sampled->choices[i].completion_tokens, 12);
  }
  EXPECT_NE(sampled->choices[0].text, sampled->choices[1].text);
  EXPECT_EQ(greedy->choices[0].text, greedy->choices[1].text);
  EXPECT_EQ(greedy->choices[0].text, alone(model, *tokenizer, *greedy, 0));
  // Each job's prompt was read once.
  EXPECT_EQ(metrics.prefilled_tokens.load(), 2 * static_cast<int64_t>(sampled->prompt.size()));
  EXPECT_EQ(sampled->prompt_tokens, static_cast<int64_t>(sampled->prompt.size()));
}

TEST(ServerChoices, AJobOfMoreChoicesThanSlotsIsRefused) {
  ChoicesServer server(2);
  Scheduler scheduler(server.model, *server.tokenizer, server.options, server.metrics);
  EXPECT_THROW(scheduler.submit(choices_job(3, 0.0F)), Error);
}

}  // namespace
}  // namespace retnet::server
