#pragma once
// Whether the client of a request is still there while a handler waits. cpp-httplib 0.11 gives a
// handler no access to its connection, and learns of a closed one only when it writes; a
// non-streamed request writes once, at the end. So the handler finds its own socket among the
// process's descriptors by the connection's two ends, and peeks at it now and then.
#include <string>

namespace retnet::server {

// The descriptor of the connected TCP socket whose peer is remote_addr:remote_port and whose local
// port is local_port (as httplib::Request reports them), or -1 when there is none.
int find_client_socket(const std::string& remote_addr, int remote_port, int local_port);

// True once the peer of connected socket `fd` has closed or reset it (a pending request the
// client pipelined does not count). Never blocks and never consumes data.
bool client_gone(int fd);

}  // namespace retnet::server
