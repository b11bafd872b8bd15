#include "client_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

namespace retnet::server {
namespace {

// The numeric host and port of a socket address (as httplib writes remote_addr), or false.
bool host_and_port(const sockaddr_storage& address, socklen_t length, std::string* host,
                   int* port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, h, sizeof(h), p, sizeof(p),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(p);
  return true;
}

}  // namespace

int find_client_socket(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_length = sizeof(peer), local_length = sizeof(local);
    // Anything that is not a connected socket fails one of these two calls.
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 ||
        getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_length) != 0)
      continue;
    std::string peer_host, local_host;
    int peer_port = 0, port = 0;
    if (host_and_port(peer, peer_length, &peer_host, &peer_port) &&
        host_and_port(local, local_length, &local_host, &port) && peer_host == remote_addr &&
        peer_port == remote_port && port == local_port) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool client_gone(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // bytes waiting: the client is there
  if (n == 0) return true;  // orderly close
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset or no longer a socket
}

}  // namespace retnet::server
