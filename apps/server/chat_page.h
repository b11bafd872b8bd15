#pragma once
// The chat page served at / (apps/server/chat_page.html, embedded in the binary at build time).
#include <string_view>

namespace retnet::server {

std::string_view chat_page_html();

}  // namespace retnet::server
