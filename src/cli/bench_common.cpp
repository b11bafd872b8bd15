#include "bench_common.h"

#include <algorithm>
#include <fstream>

#include "retnet/core/error.h"

namespace retnet::cli {

Summary summarize(std::vector<double> v) {
  RETNET_CHECK(!v.empty(), "no measurements to summarize");
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

nlohmann::json to_json(const Summary& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}};
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::vector<int32_t> bench_tokens(int64_t n, int64_t vocab, uint64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull ^ salt;
  for (auto& v : t) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  return t;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  RETNET_CHECK(f.good(), "cannot write '{}'", path);
  f << j.dump(2) << "\n";
  RETNET_CHECK(f.good(), "error writing '{}'", path);
}

}  // namespace retnet::cli
