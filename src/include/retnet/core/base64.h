#pragma once
// Base64 (RFC 4648, with padding): binary blobs, such as a SentencePiece model, stored in a
// safetensors file's metadata, whose values must be JSON strings.
#include <string>
#include <string_view>

namespace retnet {

std::string base64_encode(std::string_view bytes);
// Throws Error naming `what` on a character outside the alphabet or a length not a multiple of 4.
std::string base64_decode(std::string_view text, const std::string& what);

}  // namespace retnet
