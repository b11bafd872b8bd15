#pragma once
// Internal to src/dist: the MPI communicator's factory. mpi_communicator.cpp defines it in builds
// with MPI (RETNET_MPI=ON), no_mpi.cpp in builds without, so no header needs an #ifdef.
#include <memory>

#include "retnet/dist/communicator.h"

namespace retnet {

// MPI_COMM_WORLD, initialising MPI; nullptr in a build without MPI.
std::unique_ptr<Communicator> make_mpi_communicator();

}  // namespace retnet
