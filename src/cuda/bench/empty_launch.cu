// SPDX-License-Identifier: Apache-2.0
// An empty kernel, launched the way the attention kernels are (launch_kernel: cudaLaunchKernelEx,
// with the dependent-launch attribute where they use it): the host's floor for one kernel launch, the
// unit that pasa overhead states a call's host time in.
#include "cuda/bench/empty_launch.h"

#include "cuda/host/launch_dependent.h"

namespace pasa::cuda {
namespace {

__global__ void empty_kernel() {}

}  // namespace

void launch_empty_kernel(bool dependent, cudaStream_t stream) {
  launch_kernel(empty_kernel, dim3(1), dim3(32), 0, stream, dependent, "empty_kernel launch");
}

}  // namespace pasa::cuda
