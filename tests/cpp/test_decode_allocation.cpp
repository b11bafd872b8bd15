// Decoding allocates nothing per step: operator new is counted while a session steps (this file
// replaces the global operator new for the whole test binary; counting is off outside the window).
#include <atomic>
#include <cstdlib>
#include <new>

#include "retnet/infer/session.h"
#include "test_helpers.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace retnet;

TEST(DecodeAllocation, StepsAllocateNothing) {
  Config c;
  c.embed_dim = 32, c.value_embed_dim = 48, c.ffn_dim = 40, c.layers = 2;
  Model m = Model::init(c, 1);
  m.prepare_decode(DecodePrecision::F32);
  SessionOptions so;
  so.capacity = 3;
  Session s(m, so);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  for (int b = 0; b < 3; ++b) {
    s.add_sequence();
    s.prefill(b, prompt.data(), 5);
  }
  SamplingParams sp;
  sp.repeat_penalty = 1.1f;
  std::vector<int32_t> next(3);
  auto step = [&] {
    for (int64_t b = 0; b < s.batch(); ++b) next[b] = s.sample(b, sp, b);
    s.step(next.data());
  };
  for (int i = 0; i < 300; ++i) step();  // warm-up: the history buffers fill up
  allocations = 0;
  counting = true;
  for (int i = 0; i < 100; ++i) step();
  s.remove_sequence(1);  // sequences leaving the batch do not allocate either
  for (int i = 0; i < 100; ++i) step();
  counting = false;
  EXPECT_EQ(allocations.load(), 0) << "allocations in 200 decode steps";
}
