// SPDX-License-Identifier: Apache-2.0
// Kernel attributes (shared-memory size, carveout) set once per device and kernel instead of on every
// launch: each cudaFuncSetAttribute is a driver call of about a microsecond on the host path of a
// call whose whole budget is a few. A launcher keeps one OncePerDevice per kernel instantiation.
#pragma once

#include <cuda_runtime.h>

#include <mutex>

#include "cuda/arch/cuda_check.h"
#include "pasa/error.h"

namespace pasa::cuda {

class OncePerDevice {
 public:
  static constexpr int kMaxDevices = 64;  // as the dispatch's per-device cache

  // Runs `configure` the first time this is called on the current device (again after it throws);
  // returns that device's ordinal.
  template <class Configure>
  int operator()(Configure&& configure) {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    if (device < 0 || device >= kMaxDevices) throw Error("CUDA device ordinals above 63 are not supported");
    std::call_once(flags_[device], configure);
    return device;
  }

 private:
  std::once_flag flags_[kMaxDevices];
};

// The dynamic shared memory `kernel` may use; with max_carveout, all of the unified L1 / shared memory
// as shared memory (for kernels that read global memory through cp.async.cg, which bypasses L1, and
// want several CTAs an SM). Call it from a OncePerDevice.
template <class Kernel>
void set_shared_memory(Kernel* kernel, int bytes, bool max_carveout, const char* name) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
  if (max_carveout) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared),
               name);
  }
}

}  // namespace pasa::cuda
