// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's entry points as the dispatcher sees them. Implemented by src/cuda/ when the build
// has CUDA, and by src/cuda_absent/ (clear errors) when it does not.
#pragma once

#include <cstddef>
#include <memory>

#include "attention_checks.h"
#include "pasa/attention.h"

namespace pasa {

// Whether this build has CUDA kernels and a usable sm_90 device is present.
bool cuda_backend_available();

// Runs args on the GPU (all tensors on the device, work on args.stream). Throws pasa::Error for
// policies, head dims, dtypes or devices the kernels do not support, before any launch.
void cuda_attention(const AttentionArgs& args, const ProblemShape& shape);

// The host decisions of one problem (src/cuda/host/cuda_attention.cpp). Planning checks what
// cuda_attention checks except the data pointers; running launches only, into a caller-owned device
// workspace of cuda_plan_workspace_bytes (no allocation, no device query, no pointer-kind check).
struct CudaPlan;
std::shared_ptr<const CudaPlan> plan_cuda_attention(const AttentionArgs& args, const ProblemShape& shape);
std::size_t cuda_plan_workspace_bytes(const CudaPlan& plan);
void run_cuda_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace);

}  // namespace pasa
