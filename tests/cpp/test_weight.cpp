// The weight type (retnet/model/weight.h) and its one product (model/weight_ops.h): every element
// type in every placement it is stored in multiplies like a double-precision product of its own
// values at decode and prefill row counts; its rows and embedding lookups read those values;
// placements a type cannot take are refused by name; and a model hands out the weight its products
// read, before and after preparing it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "retnet/core/error.h"
#include "retnet/core/gemm.h"
#include "retnet/core/half.h"
#include "retnet/core/quant.h"
#include "retnet/model/model.h"
#include "retnet/model/weight.h"
#include "retnet/model/weight_ops.h"
#include "test_helpers.h"

using namespace retnet;
using namespace retnet::test;

namespace weight_test {

constexpr int64_t kN = 40, kK = 64;

// A weight of one type and placement built from float32 rows W [kN, kK], with the storage it
// points into.
struct Stored {
  Weight weight;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<BFloat16> bf16;
  std::vector<uint8_t> quant;
};

Stored store(const std::vector<float>& W, ElementType type, Placement placement) {
  Stored s;
  Weight& w = s.weight;
  w.type = type;
  w.placement = placement;
  w.N = kN;
  w.K = kK;
  w.name = std::string("test.") + element_type_name(type);
  if (const auto q = quant_type_of(type)) {
    std::vector<uint8_t> rows(static_cast<size_t>(kN) * quant_row_bytes(*q, kK));
    quantize_rows(*q, W.data(), kN, kK, kK, rows.data());
    s.quant.resize(quant_panel_bytes(*q, kN, kK));
    pack_quant_panels(*q, rows.data(), kN, kK, s.quant.data());
    w.data = s.quant.data();
    return s;
  }
  const bool panels = placement == Placement::Panels;
  const size_t n = panels ? packed_weight_elements(kN, kK) : W.size();
  if (type == ElementType::F32) {
    s.f32.resize(n);
    if (panels)
      pack_weights(W.data(), kN, kK, kK, s.f32.data());
    else
      s.f32 = W;
    w.data = s.f32.data();
  } else if (type == ElementType::F16) {
    s.f16.resize(n);
    if (panels)
      pack_weights_f16(W.data(), kN, kK, kK, s.f16.data());
    else
      for (size_t i = 0; i < n; ++i) s.f16[i] = float_to_half(W[i]);
    w.data = s.f16.data();
  } else {
    s.bf16.resize(n);
    if (panels)
      pack_weights_bf16(W.data(), kN, kK, kK, s.bf16.data());
    else
      for (size_t i = 0; i < n; ++i) s.bf16[i] = BFloat16{float_to_bf16(W[i])};
    w.data = s.bf16.data();
  }
  if (placement == Placement::InPlace) {  // two stored tensors, 24 and 16 rows, used as one
    const size_t bytes = element_bytes(type);
    const auto* base = static_cast<const uint8_t*>(w.data);
    w.parts.push_back({0, 24, base, "first", std::make_shared<std::once_flag>()});
    w.parts.push_back(
        {24, 16, base + 24 * kK * bytes, "second", std::make_shared<std::once_flag>()});
    w.data = nullptr;
  }
  return s;
}

// The values a weight holds, row by row.
std::vector<float> rows_of(const Weight& w) {
  std::vector<float> out(static_cast<size_t>(w.N * w.K));
  for (int64_t n = 0; n < w.N; ++n) weight_row(w, n, 1.f, out.data() + n * w.K);
  return out;
}

// The float32 values `type` rounds W to (what every placement of that type must hold).
std::vector<float> rounded(const std::vector<float>& W, ElementType type) {
  std::vector<float> out(W.size());
  if (const auto q = quant_type_of(type)) {
    std::vector<uint8_t> rows(static_cast<size_t>(kN) * quant_row_bytes(*q, kK));
    quantize_rows(*q, W.data(), kN, kK, kK, rows.data());
    dequantize_rows(*q, rows.data(), kN, kK, out.data(), kK);
    return out;
  }
  for (size_t i = 0; i < W.size(); ++i)
    out[i] = type == ElementType::F16    ? half_to_float(float_to_half(W[i]))
             : type == ElementType::BF16 ? bf16_to_float(float_to_bf16(W[i]))
                                         : W[i];
  return out;
}

// y = x values^T + beta y0 in double.
std::vector<double> product_reference(const std::vector<float>& x, int64_t M,
                                      const std::vector<float>& values, float beta,
                                      const std::vector<float>& y0) {
  std::vector<double> y(static_cast<size_t>(M * kN));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < kN; ++n) {
      double sum = beta * double(y0[static_cast<size_t>(m * kN + n)]);
      for (int64_t k = 0; k < kK; ++k)
        sum += double(x[static_cast<size_t>(m * kK + k)]) * values[static_cast<size_t>(n * kK + k)];
      y[static_cast<size_t>(m * kN + n)] = sum;
    }
  return y;
}

struct Case {
  ElementType type;
  Placement placement;
};

const Case kCases[] = {
    {ElementType::F32, Placement::Panels},   {ElementType::F16, Placement::Panels},
    {ElementType::BF16, Placement::Panels},  {ElementType::Q8_0, Placement::Panels},
    {ElementType::Q4_0, Placement::Panels},  {ElementType::Q4_1, Placement::Panels},
    {ElementType::F32, Placement::InPlace},  {ElementType::F16, Placement::InPlace},
    {ElementType::BF16, Placement::InPlace}, {ElementType::F32, Placement::Plain},
    {ElementType::F16, Placement::Plain},    {ElementType::BF16, Placement::Plain},
};

}  // namespace weight_test

using namespace weight_test;

TEST(Weight, EveryTypeAndPlacementHoldsItsRoundedValues) {
  const std::vector<float> W = random_vector(kN * kK, 11, 0.5);
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(element_type_name(c.type)) + " " + placement_name(c.placement));
    const Stored s = store(W, c.type, c.placement);
    EXPECT_EQ(rel_max_error(rows_of(s.weight), rounded(W, c.type)), 0.0);
  }
}

TEST(Weight, MatmulOfEveryTypeAndPlacementMatchesItsValues) {
  const std::vector<float> W = random_vector(kN * kK, 12, 0.5);
  // 1 and 5 rows decode (skinny, packed, quantised-activation kernels), 70 rows prefill.
  for (int64_t M : {1, 5, 70}) {
    const std::vector<float> x = random_vector(M * kK, 13, 1.0, static_cast<uint64_t>(M));
    const std::vector<float> y0 = random_vector(M * kN, 14, 1.0, static_cast<uint64_t>(M));
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(element_type_name(c.type)) + " " + placement_name(c.placement) +
                   " M=" + std::to_string(M));
      const Stored s = store(W, c.type, c.placement);
      for (float beta : {0.f, 1.f}) {
        std::vector<float> y = y0;
        matmul(s.weight, M, x.data(), kK, beta, y.data(), kN);
        const std::vector<double> want = product_reference(x, M, rows_of(s.weight), beta, y0);
        // Decoding against quantised weights quantises the activations to int8 too.
        const bool quantised = quant_type_of(c.type) && M <= kSkinnyMaxRows;
        EXPECT_LE(rel_max_error(y, want), quantised ? 2e-2 : 1e-5) << "beta " << beta;
      }
    }
  }
}

TEST(Weight, F32PanelsWithTheirRowsKeptPrefillFromTheRows) {
  const std::vector<float> W = random_vector(kN * kK, 15, 0.5);
  Stored s = store(W, ElementType::F32, Placement::Panels);
  s.weight.rows_f32 = W.data();
  for (int64_t M : {3, 70}) {
    const std::vector<float> x = random_vector(M * kK, 16);
    std::vector<float> y(static_cast<size_t>(M * kN)), want(y.size());
    matmul(s.weight, M, x.data(), kK, 0.f, y.data(), kN);
    if (M > kSkinnyMaxRows)
      sgemm(Trans::No, Trans::Yes, M, kN, kK, 1.f, x.data(), kK, W.data(), kK, 0.f, want.data(),
            kN);
    else
      packed_gemm_nt(M, kN, kK, x.data(), kK, s.f32.data(), 0.f, want.data(), kN);
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(float))) << "M=" << M;
  }
}

TEST(Weight, EmbedRowsLooksUpScaledRowsInEveryPlacement) {
  const std::vector<float> W = random_vector(kN * kK, 17, 0.5);
  const int32_t tokens[] = {39, 0, 24, 23, 7};
  const float scale = 3.f;
  for (const Case& c : kCases) {
    SCOPED_TRACE(std::string(element_type_name(c.type)) + " " + placement_name(c.placement));
    const Stored s = store(W, c.type, c.placement);
    const std::vector<float> values = rounded(W, c.type);
    std::vector<float> x(5 * kK), want(x.size());
    embed_rows(s.weight, tokens, 5, scale, x.data());
    for (size_t t = 0; t < 5; ++t)
      for (int64_t k = 0; k < kK; ++k)
        want[t * kK + k] = scale * values[static_cast<size_t>(tokens[t] * kK + k)];
    EXPECT_EQ(rel_max_error(x, want), 0.0);
  }
}

TEST(Weight, UnsupportedPlacementsAndCorruptRowsAreRefusedByName) {
  const std::vector<float> W = random_vector(kN * kK, 18, 0.5);
  std::vector<float> x(kK, 1.f), y(kN);
  const int32_t token = 0;
  // Quantised blocks are only kept in panels.
  Stored plain = store(W, ElementType::Q4_0, Placement::Panels);
  plain.weight.placement = Placement::Plain;
  EXPECT_TRUE(throws_error_naming([&] { matmul(plain.weight, 1, x.data(), kK, 0.f, y.data(), kN); },
                                  {"test.q4_0", "q4_0", "plain"}));
  EXPECT_TRUE(throws_error_naming([&] { embed_rows(plain.weight, &token, 1, 1.f, x.data()); },
                                  {"test.q4_0", "plain"}));
  // More stored tensors than one in-place product takes.
  Stored many = store(W, ElementType::F32, Placement::InPlace);
  const InPlaceRows last = many.weight.parts.back();
  many.weight.parts.resize(9, last);
  EXPECT_TRUE(throws_error_naming([&] { matmul(many.weight, 1, x.data(), kK, 0.f, y.data(), kN); },
                                  {"test.f32", "9"}));
  // A NaN in rows used in place names the stored tensor, on every use.
  std::vector<float> bad = W;
  bad[30 * kK + 5] = std::numeric_limits<float>::quiet_NaN();
  const Stored corrupt = store(bad, ElementType::F32, Placement::InPlace);
  for (int use = 0; use < 2; ++use)
    EXPECT_TRUE(
        throws_error_naming([&] { matmul(corrupt.weight, 1, x.data(), kK, 0.f, y.data(), kN); },
                            {"second", "row 6, column 5"}));
}

TEST(Weight, ModelHandsOutTheWeightItsProductsRead) {
  Model m = Model::init(tiny_config(), 3);
  const LayerTensors& L = m.tensors().layers[0];
  const Config& c = m.config();
  // Unprepared: the float32 rows of the buffer.
  const Weight& q = m.weight(L.q_proj);
  EXPECT_EQ(q.placement, Placement::Plain);
  EXPECT_EQ(q.type, ElementType::F32);
  EXPECT_EQ(q.N, m.layer_config(0).projection_width());
  EXPECT_EQ(q.K, c.embed_dim);
  EXPECT_EQ(q.data, m.param(L.q_proj));
  EXPECT_EQ(m.weight(m.tensors().embed).N, c.vocab_size);
  EXPECT_TRUE(throws_error_naming([&] { m.weight(L.k_proj); }, {"k_proj", "not a projection"}));
  EXPECT_TRUE(throws_error_naming([&] { m.weight(L.mixer_norm); }, {"layer_norm"}));

  Model f32 = m;
  f32.prepare_decode(DecodePrecision::F32);  // the float32 rows stay: prefill reads them
  EXPECT_EQ(f32.weight(L.fc1).placement, Placement::Panels);
  EXPECT_EQ(f32.weight(L.fc1).rows_f32, f32.param(L.fc1));

  // Quantised rows are whole blocks of 32.
  Model q4 = Model::init(model_config(32, 64, 2, 64, 2, 30), 3);
  q4.prepare_inference(DecodePrecision::Q4_0);
  const Weight& head = q4.weight(q4.tensors().output_projection);
  EXPECT_EQ(head.type, ElementType::Q4_0);
  EXPECT_EQ(head.placement, Placement::Panels);
  EXPECT_EQ(head.rows_f32, nullptr);
  EXPECT_EQ(q4.weight(q4.tensors().embed).type, ElementType::F32);  // the embedding stays float32

  Model bf16 = Model::init(tiny_config(), 3);
  bf16.prepare_inference(DecodePrecision::BF16);
  const Weight& embed = bf16.weight(bf16.tensors().embed);
  EXPECT_EQ(embed.type, ElementType::BF16);
  EXPECT_EQ(embed.placement, Placement::Plain);  // rows are looked up, not multiplied
}
