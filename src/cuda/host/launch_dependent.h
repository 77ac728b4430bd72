// SPDX-License-Identifier: Apache-2.0
// Kernel launches that may overlap the end of the kernel before them in the stream (programmatic
// dependent launch, sm_90): the launched grid's CTAs can be resident, past their launch latency,
// when the previous grid finishes. The kernel must call wait_for_previous_grid() (ptx.cuh) before
// its first global access; CUDA graphs captured from the stream keep the overlap (CUDA 12.4 or newer:
// KernelRequest::dependent_launch is false in builds with an older toolkit). Used between the
// decode path's kernels (the KV-cache append, the split kernel, a captured call's merge kernel),
// where a call is a few microseconds of GPU work and a kernel boundary costs one or two of them.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/arch/cuda_check.h"

namespace pasa::cuda {

// Launches kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the previous
// kernel in the stream when `dependent` (only where the device runs the kernel's sm_90 code: the
// caller's KernelRequest::dependent_launch). Throws pasa::Error naming `what` on a launch error.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, int smem, cudaStream_t stream,
                   bool dependent, const char* what, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = static_cast<std::size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = dependent ? 1 : 0;
  const cudaError_t status = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  if (status != cudaSuccess) cudaGetLastError();  // (a launch error is not the next launch's to report)
  check_cuda(status, what);
}

}  // namespace pasa::cuda
