// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's entry points as the dispatcher sees them. Implemented by src/cuda/ when the build
// has CUDA, and by src/cuda_absent/ (clear errors) when it does not.
#pragma once

#include <cstddef>
#include <memory>

#include "attention_checks.h"
#include "pasa/attention.h"

namespace pasa {

// Whether this build has CUDA kernels and the current device can run them (compute capability 8.0
// or newer).
bool cuda_backend_available();

// Whether calls on the current device take the sm_90a kernels by default: an sm_90 GPU, a build with
// sm_90a kernels, and PASA_CUDA_PATH not set to portable. The pasa and sage8 policies need it.
bool cuda_hopper_path_available();

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

// What a plan chose: its path (the sm_90a kernels, or the portable ones: another GPU, or asked for)
// and its kernel's name ("exact (portable)", "decode (split-KV)", ...).
enum class CudaKernelPath { hopper, portable };
struct CudaPlanChoice {
  CudaKernelPath path;
  const char* kernel;
};
CudaPlanChoice cuda_plan_choice(const CudaPlan& plan);

}  // namespace pasa
