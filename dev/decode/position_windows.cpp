// Decode latency at positions 16, 1k, 4k and 16k without a prefill just before each window: each
// position's state is prefilled and saved once, then one session loads it before every window,
// the order rotating over 30 repetitions. Prints the median ms per step at each position.
// Usage: position_windows [window = 64]. Build: README.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "retnet/infer/session.h"
#include "retnet/model/model.h"
using namespace retnet;
int main(int argc, char** argv) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  Model m = Model::init(Config{}, 1);
  m.prepare_decode(DecodePrecision::F32);
  std::vector<int64_t> positions{16, 1024, 4096, 16384};
  for (auto p : positions) {
    Session s(m);
    s.add_sequence();
    std::vector<int32_t> t(p);
    for (int64_t i = 0; i < p; ++i) t[i] = (i * 7919) % 256;
    s.prefill(0, t.data(), p);
    s.save(dir + "/retnet-position-windows-" + std::to_string(p) + ".state");
  }
  Session s(m);
  s.add_sequence();
  const int window = argc > 1 ? atoi(argv[1]) : 64;
  std::vector<std::vector<double>> r(4);
  for (int rep = 0; rep < 30; ++rep)
    for (int jj = 0; jj < 4; ++jj) {
      int j = (jj + rep) % 4;  // rotate the order
      s.load(dir + "/retnet-position-windows-" + std::to_string(positions[j]) + ".state");
      int32_t tok = 65;
      std::vector<double> st;
      for (int i = 0; i < window + 4; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        s.step(&tok);
        if (i >= 4)
          st.push_back(
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count());
      }
      std::sort(st.begin(), st.end());
      r[j].push_back(st[st.size() / 2]);
    }
  for (auto p : positions)
    std::filesystem::remove(dir + "/retnet-position-windows-" + std::to_string(p) + ".state");
  for (int j = 0; j < 4; ++j) {
    std::sort(r[j].begin(), r[j].end());
    std::printf("pos %ld: median %.4f ms\n", (long)positions[j], r[j][15]);
  }
}
