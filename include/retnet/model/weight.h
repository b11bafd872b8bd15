#pragma once
// A stored projection or embedding as the forward pass multiplies by it: its element type, where
// its values lie (placement) and its shape. One type for every weight a model can hold, so the
// layer loop hands any of them to one product (src/include/retnet/model/weight_ops.h) and never
// asks which copy a model keeps.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "retnet/core/quant_type.h"

namespace retnet {

// float32; IEEE half and bfloat16 (float32 accumulation); ggml's blocks of 32 (core/quant.h).
enum class ElementType { F32, F16, BF16, Q8_0, Q4_0, Q4_1 };
const char* element_type_name(ElementType type);  // "f32", "f16", "bf16", "q8_0", ...
// Bytes per element of the unquantised types; an Error naming the type for a quantised one.
size_t element_bytes(ElementType type);
std::optional<QuantType> quant_type_of(ElementType type);  // nullopt for f32, f16, bf16
ElementType element_type_of(QuantType type);

enum class Placement {
  // Panels of 16 output rows [ceil(N/16)][K][16] (f32, f16, bf16: core/gemm.h), or quantised
  // panel groups (core/quant.h): what decoding reads fastest, built at load.
  Panels,
  // Row-major rows used where they lie (a mapped file), one part per stored tensor (q|k|v|g are
  // separate tensors of a file, used as one matrix): nothing is copied at load.
  InPlace,
  // Row-major [N, K] in memory the model owns (its float32 buffer, a half-precision embedding).
  Plain,
};
const char* placement_name(Placement placement);  // "panels", "in place", "plain"

// Rows [first_row, first_row + rows) of an in-place weight, row-major with row stride K.
struct InPlaceRows {
  int64_t first_row = 0, rows = 0;
  const void* data = nullptr;  // of the weight's element type
  std::string tensor;          // the stored tensor's name (and file), for errors
  // Set once the values have been found finite: they are scanned when first used, when decoding
  // pages them in anyway, rather than at open (which would read the whole file).
  std::shared_ptr<std::once_flag> scanned;
};

// The weight W [N, K] of a product y = x W^T (possibly several adjacent tensors used as one
// matrix: q|k|v|g, fc1|gate), or an embedding table [vocab, d].
struct Weight {
  ElementType type = ElementType::F32;
  Placement placement = Placement::Plain;
  int64_t N = 0, K = 0;
  const void* data = nullptr;      // Panels: the panels; Plain: the rows (stride K)
  std::vector<InPlaceRows> parts;  // InPlace: the rows of each stored tensor, in order
  // F32 panels packed from float32 rows the model still holds (prepare_decode): products of many
  // rows read those rows with sgemm instead of unpacking the panels.
  const float* rows_f32 = nullptr;
  std::string name;  // the (first) tensor's name, for errors

  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

}  // namespace retnet
