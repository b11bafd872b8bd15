// Unicode normalization forms of tokenizer.json normalizers (NFC, NFD, NFKC, NFKD) by ICU.
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

#include <algorithm>

#include "components.h"
#include "retnet/core/error.h"

namespace retnet::hf {
namespace {

const icu::Normalizer2& normalizer(NormalizerStep::Kind form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n =
      form == NormalizerStep::kNfc    ? icu::Normalizer2::getNFCInstance(status)
      : form == NormalizerStep::kNfd  ? icu::Normalizer2::getNFDInstance(status)
      : form == NormalizerStep::kNfkc ? icu::Normalizer2::getNFKCInstance(status)
                                      : icu::Normalizer2::getNFKDInstance(status);
  RETNET_CHECK(U_SUCCESS(status) && n != nullptr,
               "ICU's Unicode normalization data did not load ({}); is libicu installed?",
               u_errorName(status));
  return *n;
}

}  // namespace

std::string unicode_normalize(NormalizerStep::Kind form, std::string_view text) {
  const icu::Normalizer2& n = normalizer(form);
  std::string out;
  out.reserve(text.size());
  icu::StringByteSink<std::string> sink(&out);
  // ICU takes int32 lengths: a long text goes in pieces cut where a character starts that no
  // normalization combines with what precedes it, so the pieces normalize as the whole would.
  constexpr size_t kPiece = size_t{1} << 20;
  for (size_t start = 0; start < text.size();) {
    size_t end = std::min(text.size(), start + kPiece);
    for (size_t cut = end; end < text.size() && cut > start; --cut) {
      if ((static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) continue;
      UChar32 c;
      int32_t i = 0;
      U8_NEXT(reinterpret_cast<const uint8_t*>(text.data() + cut), i,
              static_cast<int32_t>(std::min<size_t>(4, text.size() - cut)), c);
      if (c >= 0 && n.hasBoundaryBefore(c)) {
        end = cut;
        break;
      }
    }
    UErrorCode status = U_ZERO_ERROR;
    n.normalizeUTF8(0, icu::StringPiece(text.data() + start, static_cast<int32_t>(end - start)),
                    sink, nullptr, status);
    RETNET_CHECK(U_SUCCESS(status), "Unicode normalization of a text failed: {}",
                 u_errorName(status));
    start = end;
  }
  return out;
}

}  // namespace retnet::hf
