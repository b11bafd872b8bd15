// Builds without MPI (RETNET_MPI=OFF or OpenMPI not found): no MPI communicator.
#include "mpi_backend.h"

namespace retnet {

std::unique_ptr<Communicator> make_mpi_communicator() { return nullptr; }

}  // namespace retnet
