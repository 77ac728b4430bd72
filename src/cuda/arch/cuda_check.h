// SPDX-License-Identifier: Apache-2.0
// CUDA runtime errors as pasa::Error, naming the call that failed.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "pasa/error.h"

namespace pasa::cuda {

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(status) + " (" +
                cudaGetErrorString(status) + ")");
  }
}

// After a kernel launch: the launch's own error (bad configuration, too much shared memory).
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

}  // namespace pasa::cuda
