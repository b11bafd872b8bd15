// Names and sizes of a Weight's element types and placements (retnet/model/weight.h).
#include "retnet/model/weight.h"

#include "retnet/core/error.h"

namespace retnet {

const char* element_type_name(ElementType type) {
  switch (type) {
    case ElementType::F32:
      return "f32";
    case ElementType::F16:
      return "f16";
    case ElementType::BF16:
      return "bf16";
    case ElementType::Q8_0:
      return "q8_0";
    case ElementType::Q4_0:
      return "q4_0";
    case ElementType::Q4_1:
      return "q4_1";
  }
  return "?";
}

size_t element_bytes(ElementType type) {
  switch (type) {
    case ElementType::F32:
      return 4;
    case ElementType::F16:
    case ElementType::BF16:
      return 2;
    default:
      throw Error(fmt::format("element type {} is stored in blocks of {}, not element by element",
                              element_type_name(type), kQuantBlock));
  }
}

std::optional<QuantType> quant_type_of(ElementType type) {
  switch (type) {
    case ElementType::Q8_0:
      return QuantType::Q8_0;
    case ElementType::Q4_0:
      return QuantType::Q4_0;
    case ElementType::Q4_1:
      return QuantType::Q4_1;
    default:
      return std::nullopt;
  }
}

ElementType element_type_of(QuantType type) {
  switch (type) {
    case QuantType::Q8_0:
      return ElementType::Q8_0;
    case QuantType::Q4_0:
      return ElementType::Q4_0;
    case QuantType::Q4_1:
      return ElementType::Q4_1;
  }
  return ElementType::Q8_0;
}

const char* placement_name(Placement placement) {
  switch (placement) {
    case Placement::Panels:
      return "panels";
    case Placement::InPlace:
      return "in place";
    case Placement::Plain:
      return "plain";
  }
  return "?";
}

}  // namespace retnet
