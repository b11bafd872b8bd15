#include "thread_team.h"

#include <omp.h>

#include "retnet/core/threads.h"

namespace retnet::server {

void adopt_engine_threads(int threads) { set_num_threads(threads); }

void release_thread_team() { omp_pause_resource_all(omp_pause_soft); }

}  // namespace retnet::server
