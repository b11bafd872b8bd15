// Quantising and dequantising rows of weights in ggml's Q8_0 / Q4_0 / Q4_1 block layouts, and
// repacking them into the decode panels (see retnet/core/quant.h). The rounding follows ggml's reference quantisers, so a file written here
// holds the blocks llama.cpp would have written for the same weights.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "retnet/core/error.h"
#include "retnet/core/half.h"
#include "retnet/core/quant.h"

namespace retnet {

QuantType parse_quant_type(const std::string& name, const std::string& option) {
  if (name == "q8_0") return QuantType::Q8_0;
  if (name == "q4_0") return QuantType::Q4_0;
  if (name == "q4_1") return QuantType::Q4_1;
  throw Error(fmt::format("{}: '{}' is not a quantisation type (expected q8_0, q4_0 or q4_1)",
                          option, name));
}

const char* quant_type_name(QuantType type) {
  switch (type) {
    case QuantType::Q8_0:
      return "q8_0";
    case QuantType::Q4_0:
      return "q4_0";
    default:
      return "q4_1";
  }
}

int64_t quant_block_bytes(QuantType type) {
  switch (type) {
    case QuantType::Q8_0:
      return 2 + kQuantBlock;
    case QuantType::Q4_0:
      return 2 + kQuantBlock / 2;
    default:
      return 4 + kQuantBlock / 2;
  }
}

double quant_bits_per_weight(QuantType type) {
  return 8.0 * static_cast<double>(quant_block_bytes(type)) / kQuantBlock;
}

size_t quant_row_bytes(QuantType type, int64_t K, const std::string& what) {
  RETNET_CHECK(K > 0 && K % kQuantBlock == 0,
               "{}: rows of {} values cannot be quantised to {}: blocks of {} values need a "
               "multiple of {}",
               what, K, quant_type_name(type), kQuantBlock, kQuantBlock);
  return static_cast<size_t>(K / kQuantBlock * quant_block_bytes(type));
}

namespace {

void put_half(uint8_t* p, float v) {
  const uint16_t h = float_to_half(v);
  std::memcpy(p, &h, 2);
}
float get_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

void quantize_block(QuantType type, const float* x, uint8_t* out) {
  if (type == QuantType::Q8_0) {
    float amax = 0.f;
    for (int64_t i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    put_half(out, d);
    for (int64_t i = 0; i < kQuantBlock; ++i) {
      const float q = std::clamp(std::round(x[i] * id), -127.f, 127.f);
      out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
    return;
  }
  uint8_t nibble[kQuantBlock];
  if (type == QuantType::Q4_0) {
    // The value of largest magnitude maps to -8 exactly (its sign kept): one more level used.
    float amax = 0.f, max = 0.f;
    for (int64_t i = 0; i < kQuantBlock; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
    const float d = max / -8.f, id = d != 0.f ? 1.f / d : 0.f;
    put_half(out, d);
    for (int64_t i = 0; i < kQuantBlock; ++i)
      nibble[i] = static_cast<uint8_t>(std::clamp(x[i] * id + 8.5f, 0.f, 15.f));
    out += 2;
  } else {
    float lo = x[0], hi = x[0];
    for (int64_t i = 1; i < kQuantBlock; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    const float d = (hi - lo) / 15.f, id = d != 0.f ? 1.f / d : 0.f;
    put_half(out, d);
    put_half(out + 2, lo);
    for (int64_t i = 0; i < kQuantBlock; ++i)
      nibble[i] = static_cast<uint8_t>(std::clamp((x[i] - lo) * id + 0.5f, 0.f, 15.f));
    out += 4;
  }
  for (int64_t j = 0; j < kQuantBlock / 2; ++j)
    out[j] = static_cast<uint8_t>(nibble[j] | nibble[j + kQuantBlock / 2] << 4);
}

void dequantize_block(QuantType type, const uint8_t* in, float* y) {
  const float d = get_half(in);
  if (type == QuantType::Q8_0) {
    for (int64_t i = 0; i < kQuantBlock; ++i) y[i] = d * static_cast<int8_t>(in[2 + i]);
    return;
  }
  const float m = type == QuantType::Q4_1 ? get_half(in + 2) : -8.f * d;
  const uint8_t* qs = in + (type == QuantType::Q4_1 ? 4 : 2);
  for (int64_t j = 0; j < kQuantBlock / 2; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
    y[j + kQuantBlock / 2] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

}  // namespace

void quantize_rows(QuantType type, const float* W, int64_t N, int64_t K, int64_t ldw, uint8_t* out,
                   const std::string& what) {
  const size_t row_bytes = quant_row_bytes(type, K, what);
  const int64_t block_bytes = quant_block_bytes(type);
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (N * K >= (1 << 16))
  for (int64_t n = 0; n < N; ++n) {
    const float* row = W + n * ldw;
    bool row_finite = true;
    for (int64_t k = 0; k < K; ++k) row_finite = row_finite && std::isfinite(row[k]);
    finite = finite && row_finite;
    if (!row_finite) continue;  // converting NaN to an integer is undefined: the error follows
    for (int64_t b = 0; b < K / kQuantBlock; ++b)
      quantize_block(type, row + b * kQuantBlock, out + n * row_bytes + b * block_bytes);
  }
  RETNET_CHECK(finite, "{}: a weight is not finite (NaN or infinity): cannot quantise it", what);
}

void dequantize_rows(QuantType type, const uint8_t* q, int64_t N, int64_t K, float* out,
                     int64_t ldo) {
  const size_t row_bytes = quant_row_bytes(type, K);
  const int64_t block_bytes = quant_block_bytes(type);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < K / kQuantBlock; ++b)
      dequantize_block(type, q + n * row_bytes + b * block_bytes, out + n * ldo + b * kQuantBlock);
}

namespace {

// One group's geometry in panels: header bytes (scales) and value bytes of a ggml block, and the
// bytes per block of the quants and scales planes.
struct PanelShape {
  int64_t header, values, quants, scales, nb, group_bytes;
};
PanelShape panel_shape(QuantType type, int64_t K) {
  PanelShape s;
  s.header = type == QuantType::Q4_1 ? 4 : 2;
  s.values = quant_block_bytes(type) - s.header;
  s.quants = kQuantPanelRows * s.values;
  s.scales = kQuantPanelRows * s.header;
  s.nb = K / kQuantBlock;
  s.group_bytes = s.nb * (s.quants + s.scales);
  return s;
}

// Calls piece(panel_offset, row_offset, bytes) for each piece of the group's row r: each block's
// f16 scales (d, then Q4_1's m: each a plane of the group's rows' values) and each 4-byte run of its
// values, with where the piece lies in the group's panel and in the ggml row.
template <typename Piece>
void for_each_piece(const PanelShape& s, int64_t r, int64_t block_bytes, Piece piece) {
  for (int64_t b = 0; b < s.nb; ++b) {
    for (int64_t h = 0; h < s.header / 2; ++h)
      piece(b * (s.quants + s.scales) + s.quants + h * 2 * kQuantPanelRows + 2 * r,
            b * block_bytes + 2 * h, 2);
    for (int64_t i = 0; i < s.values; i += 4)
      piece(b * (s.quants + s.scales) + i / 4 * (4 * kQuantPanelRows) + 4 * r,
            b * block_bytes + s.header + i, 4);
  }
}

}  // namespace

size_t quant_panel_bytes(QuantType type, int64_t N, int64_t K) {
  const int64_t groups = (N + kQuantPanelRows - 1) / kQuantPanelRows;
  return static_cast<size_t>(groups * kQuantPanelRows) * quant_row_bytes(type, K);
}

void pack_quant_panels(QuantType type, const uint8_t* rows, int64_t N, int64_t K, uint8_t* panels) {
  const PanelShape s = panel_shape(type, K);
  const size_t row_bytes = quant_row_bytes(type, K);
  const int64_t groups = (N + kQuantPanelRows - 1) / kQuantPanelRows;
  std::memset(panels, 0, quant_panel_bytes(type, N, K));  // padding rows: zero scales and values
#pragma omp parallel for schedule(static) if (N * K >= (1 << 20))
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < kQuantPanelRows && g * kQuantPanelRows + r < N; ++r) {
      uint8_t* group = panels + g * s.group_bytes;
      const uint8_t* row = rows + (g * kQuantPanelRows + r) * row_bytes;
      for_each_piece(s, r, quant_block_bytes(type), [&](int64_t at, int64_t from, int64_t bytes) {
        std::memcpy(group + at, row + from, static_cast<size_t>(bytes));
      });
    }
}

void unpack_quant_panels(QuantType type, const uint8_t* panels, int64_t K, int64_t n0, int64_t count,
                         uint8_t* rows) {
  const PanelShape s = panel_shape(type, K);
  const size_t row_bytes = quant_row_bytes(type, K);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = n0 + i;
    const uint8_t* group = panels + n / kQuantPanelRows * s.group_bytes;
    uint8_t* row = rows + i * row_bytes;
    for_each_piece(s, n % kQuantPanelRows, quant_block_bytes(type),
                   [&](int64_t at, int64_t to, int64_t bytes) {
                     std::memcpy(row + to, group + at, static_cast<size_t>(bytes));
                   });
  }
}

void dequantize_panel_rows(QuantType type, const uint8_t* panels, int64_t K, int64_t n0,
                           int64_t count, float* out, int64_t ldo) {
  std::vector<uint8_t> row(quant_row_bytes(type, K));
  for (int64_t i = 0; i < count; ++i) {
    unpack_quant_panels(type, panels, K, n0 + i, 1, row.data());
    dequantize_rows(type, row.data(), 1, K, out + i * ldo, ldo);
  }
}

}  // namespace retnet
