#pragma once
// The block-quantised weight types (ggml's Q8_0, Q4_0, Q4_1; layouts in core/quant.h): their names
// and sizes, which models, files and options refer to.
#include <cstddef>
#include <cstdint>
#include <string>

namespace retnet {

enum class QuantType { Q8_0, Q4_0, Q4_1 };
inline constexpr int64_t kQuantBlock = 32;  // weights per block

// "q8_0" | "q4_0" | "q4_1"; anything else is an Error naming `option`.
QuantType parse_quant_type(const std::string& name, const std::string& option);
const char* quant_type_name(QuantType type);
// Bytes of one block (34, 18, 20) and bits per weight (8.5, 4.5, 5).
int64_t quant_block_bytes(QuantType type);
double quant_bits_per_weight(QuantType type);
// Bytes of one quantised row of K values; an Error naming `what` unless K is a positive multiple
// of 32.
size_t quant_row_bytes(QuantType type, int64_t K, const std::string& what = "a quantised matrix");

}  // namespace retnet
