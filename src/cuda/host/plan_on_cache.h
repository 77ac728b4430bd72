// SPDX-License-Identifier: Apache-2.0
// What the KV-cache entry point (cuda_kvcache.cpp) needs of a plan beyond cuda_backend.h: a plan of the
// decode kernel, its device, whether it can launch, and running it on a cache's lengths and block
// table.
#pragma once

#include "cuda/host/decode_params.h"
#include "cuda_backend.h"

namespace pasa {

// plan_cuda_attention with the split-KV decode kernel as the only candidate (the one kernel that reads
// a KV cache); throws pasa::Error saying why it does not run the call.
std::shared_ptr<const CudaPlan> plan_cuda_decode(const AttentionArgs& args, const ProblemShape& shape);
int cuda_plan_device(const CudaPlan& plan);
// Before a plan's first launch: the calling thread's current device is the plan's; a CUDA error
// the caller left pending is cleared; stats that read an fdpp recompute count back are refused on a
// stream being captured. Throws pasa::Error, nothing launched.
void check_cuda_plan_launchable(const CudaPlan& plan, const AttentionArgs& args);
// run_cuda_plan for a decode plan whose keys are `cache`'s (args.k, args.v: the cache tensors).
void run_cuda_decode_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace,
                          const cuda::KvCacheRead& cache);

}  // namespace pasa
