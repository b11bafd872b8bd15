#pragma once
// Shared test utilities: seeded random data and a relative max error that fails on NaN and Inf
// and names the offending elements.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "retnet/core/arena.h"
#include "retnet/core/error.h"
#include "retnet/core/form.h"
#include "retnet/core/rng.h"
#include "retnet/core/tensor.h"
#include "retnet/model/config.h"
#include "retnet/model/mixer_options_codec.h"

namespace retnet::test {

inline std::vector<float> random_vector(size_t n, uint64_t seed, double scale = 1.0,
                                        uint64_t stream = 0) {
  Philox rng(seed);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * rng.normal(stream, i));
  return v;
}

// Random per-head inputs q, k [B, T, H, Dk] and v [B, T, H, Dv] (contiguous) of a kernel test,
// with views of them and of outputs of the same layout.
struct HeadInputs {
  int64_t B, T, H, Dk, Dv;
  std::vector<float> q, k, v;

  HeadInputs(int64_t b, int64_t t, int64_t h, int64_t dk, int64_t dv, uint64_t seed,
             double q_scale, double k_scale)
      : B(b), T(t), H(h), Dk(dk), Dv(dv),
        q(random_vector(b * t * h * dk, seed, q_scale, 0)),
        k(random_vector(b * t * h * dk, seed, k_scale, 1)),
        v(random_vector(b * t * h * dv, seed, 1.0, 2)) {}

  TensorView view(std::vector<float>& x, int64_t D) const {
    return TensorView::contiguous(x.data(), {B, T, H, D});
  }
};

inline Config model_config(int64_t d, int64_t value_dim, int64_t heads, int64_t ffn, int64_t layers,
                           int64_t vocab) {
  Config c;
  c.embed_dim = d, c.value_embed_dim = value_dim, c.heads = heads;
  c.ffn_dim = ffn, c.layers = layers, c.vocab_size = vocab;
  return c;
}

// Sets the options of c's mixer from config fields, as a config file gives them (each mixer reads
// its own: "performer_features", "aft_max_distance", "attention"; the others are ignored).
inline void set_mixer_options(Config& c, const std::string& fields) {
  c.mixer_options = c.mixer->options
                        ? c.mixer->options->read(nlohmann::json::parse(fields), "test options")
                        : nullptr;
}

// A two-layer model small enough for finite differences and file round trips.
inline Config tiny_config() { return model_config(16, 24, 2, 20, 2, 30); }
// A config with flash-linear-attention's RetNet conventions (half-split rotation, unnormalised
// scores, learned head-norm weights, swish gate), the shape an fla directory round-trips.
inline Config fla_conventions(Config c) {
  c.rotary = RotaryStyle::HalfSplit;
  c.normalize_scores = false;
  c.head_norm_weight = true;
  c.activation = Activation::Swish;
  return c;
}

// A model of width d with fla's conventions (4 heads, value and FFN width 2 d), tied or not.
inline Config fla_model_config(int64_t d, int64_t layers, int64_t vocab, bool tied) {
  Config c = fla_conventions(model_config(d, 2 * d, 4, 2 * d, layers, vocab));
  c.tie_embeddings = tied;
  return c;
}

// A two-layer byte-vocabulary model with chunks of 8 for decoding tests (prefill in chunks, steps).
inline Config small_decode_config() {
  Config c = model_config(32, 48, 4, 40, 2, 256);
  c.recurrent_chunk_size = 8;
  return c;
}

// Success when `f` throws an Error whose message holds every one of `parts`.
inline ::testing::AssertionResult throws_error_naming(const std::function<void()>& f,
                                                      std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      if (message.find(part) == std::string::npos)
        return ::testing::AssertionFailure() << "the error lacks '" << part << "': " << message;
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no Error thrown";
}

// A fresh, empty directory <tmp>/retnet_<stem>_<pid> (ctest runs every test in its own process).
inline std::filesystem::path fresh_temp_dir(const std::string& stem) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("retnet_" + stem + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Writes `content` to the file at `path` as it is; returns the path.
inline std::string write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream(path, std::ios::binary) << content;
  return path.string();
}

// A key/value cache (AttentionCache, AftCache) for B sequences that owns its lengths; the storage
// is the test's to size.
template <typename Cache>
struct OwnedCache {
  std::vector<float> storage;
  std::vector<int64_t> length;
  Cache cache;
  explicit OwnedCache(int64_t B) : length(B, 0) { cache.length = length.data(); }
};

inline std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// Rows of head h of sequence b of a contiguous [B, T, H, D] tensor, as a contiguous [T, D] block.
inline std::vector<float> head_rows(const std::vector<float>& x, int64_t T, int64_t H, int64_t D,
                                    int64_t b, int64_t h) {
  std::vector<float> r(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < D; ++i) r[t * D + i] = x[((b * T + t) * H + h) * D + i];
  return r;
}

// Central differences of loss() with respect to every entry of x (restored afterwards).
inline std::vector<double> finite_differences(const std::function<double()>& loss,
                                              std::vector<double>& x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// Index of the first NaN or infinite element of a, or a.size() when every element is finite.
template <typename A>
size_t first_non_finite(const A& a) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!std::isfinite(static_cast<double>(a[i]))) return i;
  return a.size();
}

// A running maximum that keeps NaN: std::max(worst, NaN) returns worst, so a plain running
// maximum would let a NaN vanish and a test comparing `worst <= tol` pass. Use it for every
// "worst error" loop; NaN <= tol is false, so the test then fails.
inline double max_keep_nan(double worst, double x) {
  if (std::isnan(worst) || std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(worst, x);
}

// max|a - b| / max|b| (absolute when b is all zero): the tolerance measure of the project.
// +infinity when the sizes differ or when any element of a or b is NaN or infinite, so that
// neither `err <= tol` nor a running maximum of it can pass on non-finite data.
template <typename A, typename B>
double rel_max_error(const A& a, const B& b) {
  if (a.size() != b.size() || first_non_finite(a) != a.size() || first_non_finite(b) != b.size())
    return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den == 0 ? num : num / den;
}

// "NaN", "+inf", "-inf" or the number, for failure messages.
inline std::string describe_value(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+inf" : "-inf";
  std::ostringstream s;
  s << std::setprecision(9) << x;
  return s.str();
}

namespace detail {
// Appends to f a description of the first non-finite element of x (named x_name; y is the other
// array, of the same size) and returns true, or returns false when x is all finite.
template <typename X, typename Y>
bool describe_non_finite(const X& x, const Y& y, const char* x_name, const char* y_name,
                         ::testing::AssertionResult& f) {
  const size_t bad = first_non_finite(x);
  if (bad == x.size()) return false;
  size_t total = 0;
  for (size_t i = bad; i < x.size(); ++i) total += !std::isfinite(static_cast<double>(x[i]));
  f << "non-finite " << x_name << " element: " << x_name << "[" << bad
    << "] = " << describe_value(static_cast<double>(x[bad])) << " (" << y_name << " "
    << describe_value(static_cast<double>(y[bad])) << "); " << total << " of " << x.size()
    << " elements of " << x_name << " are not finite";
  return true;
}
}  // namespace detail

// gtest assertion: a (actual) equals b (expected) within relative max error tol. Fails, saying
// so, on a size mismatch and on any NaN or infinite element of either array (with its index and
// value); otherwise on an error above tol, printing the first mismatches.
template <typename A, typename B>
::testing::AssertionResult close(const A& a, const B& b, double tol) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: actual " << a.size() << " vs expected "
                                         << b.size();
  if (auto f = ::testing::AssertionFailure();
      detail::describe_non_finite(a, b, "actual", "expected", f) ||
      detail::describe_non_finite(b, a, "expected", "actual", f))
    return f;
  const double err = rel_max_error(a, b);
  if (err <= tol) return ::testing::AssertionSuccess();
  double den = 0;
  for (size_t i = 0; i < b.size(); ++i) den = std::max(den, std::fabs(double(b[i])));
  const double allowed = tol * (den == 0 ? 1.0 : den);
  auto f = ::testing::AssertionFailure();
  f << "relative max error " << err << " > " << tol << "; first mismatches:";
  int shown = 0;
  for (size_t i = 0; i < b.size() && shown < 5; ++i) {
    double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d <= allowed)) {
      f << " [" << i << "] " << describe_value(double(a[i])) << " vs "
        << describe_value(double(b[i])) << ";";
      ++shown;
    }
  }
  return f;
}

// Gradients accumulate (+=): after a second call twice[i] = 2 once[i], within tol relative to
// 1 + |twice[i]|. Fails on the first element that is not (NaN included).
template <typename A, typename B>
::testing::AssertionResult doubled(const A& twice, const B& once, double tol = 1e-5) {
  if (twice.size() != once.size())
    return ::testing::AssertionFailure() << "sizes differ: " << twice.size() << " vs " << once.size();
  for (size_t i = 0; i < twice.size(); ++i) {
    const double t = static_cast<double>(twice[i]), o = static_cast<double>(once[i]);
    if (!(std::fabs(t - 2 * o) <= tol * (1 + std::fabs(t))))
      return ::testing::AssertionFailure() << "[" << i << "] " << describe_value(t)
                                           << " after two calls, " << describe_value(o)
                                           << " after one";
  }
  return ::testing::AssertionSuccess();
}

// Runs `backward` (which must reset its arena) a second time after a first call and checks that
// `watched` doubled, as gradients that accumulate (+=) must; then halves every gradient in
// `grads` back to one call's worth.
template <typename Fn>
::testing::AssertionResult second_call_doubles(Fn backward, const std::vector<float>& watched,
                                               std::initializer_list<std::vector<float>*> grads) {
  const std::vector<float> once = watched;
  backward();
  ::testing::AssertionResult result = doubled(watched, once);
  for (auto* g : grads)
    for (float& x : *g) x *= 0.5f;
  return result;
}

// Calls `backward` once, then checks as second_call_doubles; `arena` (the one backward uses) is
// reset before each call.
template <typename Fn>
::testing::AssertionResult accumulates_over_two_calls(
    Arena& arena, Fn backward, const std::vector<float>& watched,
    std::initializer_list<std::vector<float>*> grads) {
  auto run = [&] {
    arena.reset();
    backward();
  };
  run();
  return second_call_doubles(run, watched, grads);
}

// A reference backward's share of one score's gradient ds = dL/d(q_n . k_m) over Dk entries:
// dq_n += ds k_m and dk_m += ds q_n.
inline void add_score_gradient(double ds, const double* q_n, const double* k_m, double* dq_n,
                               double* dk_m, int64_t Dk) {
  for (int64_t i = 0; i < Dk; ++i) {
    dq_n[i] += ds * k_m[i];
    dk_m[i] += ds * q_n[i];
  }
}

// Gradients against a reference that may be identically zero (one token: the output does not
// depend on q and k), where only float rounding of cancelling terms remains: when max|want| is
// below zero_below, every |got| must be below abs_tol; otherwise close(got, want, tol). A size
// mismatch or a NaN or Inf on either side fails as in close().
template <typename A, typename B>
::testing::AssertionResult close_or_zero(const A& got, const B& want, double tol,
                                         double zero_below, double abs_tol = 1e-5) {
  if (got.size() != want.size() || first_non_finite(got) != got.size() ||
      first_non_finite(want) != want.size())
    return close(got, want, tol);
  double top = 0;
  for (size_t i = 0; i < want.size(); ++i) top = std::max(top, std::fabs(double(want[i])));
  if (top >= zero_below) return close(got, want, tol);
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i])) < abs_tol))
      return ::testing::AssertionFailure()
             << "the reference is 0 (max |expected| " << top << " < " << zero_below
             << ") but actual[" << i << "] = " << describe_value(double(got[i])) << ", not below "
             << abs_tol;
  return ::testing::AssertionSuccess();
}

// Every form of a kernel test problem (p.run(form, chunk = default)) against its reference:
// parallel, recurrent, and chunkwise at chunk sizes that divide T and that don't.
template <class Problem, class Reference>
void expect_forms_match_reference(Problem& p, const Reference& ref) {
  EXPECT_TRUE(close(p.run(Form::Parallel), ref, 1e-5)) << "parallel";
  auto recurrent = p.run(Form::Recurrent);
  EXPECT_TRUE(close(recurrent, ref, 1e-5)) << "recurrent";
  for (int64_t chunk : {1, 3, 16, 64, 1000}) {
    auto chunked = p.run(Form::Chunkwise, chunk);
    EXPECT_TRUE(close(chunked, ref, 1e-5)) << "chunk " << chunk;
    EXPECT_TRUE(close(chunked, recurrent, 1e-5)) << "chunk " << chunk << " vs recurrent";
  }
}

}  // namespace retnet::test
