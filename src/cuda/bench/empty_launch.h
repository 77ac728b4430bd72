// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cuda_runtime.h>

namespace pasa::cuda {

// Launches a kernel that does nothing (one warp) on `stream`, as a programmatic dependent launch when
// `dependent`: pasa overhead's floor for the host time of one launch.
void launch_empty_kernel(bool dependent, cudaStream_t stream);

}  // namespace pasa::cuda
