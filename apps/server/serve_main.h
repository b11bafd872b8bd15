#pragma once
// Runs `retnet serve` until SIGINT or SIGTERM; throws Error on bad options or a port in use.
#include "serve_options.h"

namespace retnet::server {

void run_server(ServeOptions options);

}  // namespace retnet::server
