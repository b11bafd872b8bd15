#include <cerrno>
#include <cstdlib>

#include "commands.h"
#include "retnet/core/error.h"
#include "retnet/core/parallel.h"

namespace retnet::cli {

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> tokens;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    RETNET_CHECK(!item.empty(), "--tokens: empty item at character {} of '{}'", i,
                 text.substr(0, 64));
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(item.c_str(), &end, 10);
    RETNET_CHECK(end && *end == '\0' && errno == 0 && v >= INT32_MIN && v <= INT32_MAX,
                 "--tokens: '{}' is not a token id (expected comma-separated integers)",
                 item.substr(0, 32));
    tokens.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  return tokens;
}

void apply_threads(int threads) { set_num_threads(threads); }

std::optional<Config> optional_config(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return Config::from_file(path);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace retnet::cli
