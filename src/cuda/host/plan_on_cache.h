// SPDX-License-Identifier: Apache-2.0
// What the KV-cache entry point (cuda_kvcache.cpp) needs of a plan beyond cuda_backend.h: whether it
// chose the decode kernel, its device, and running it on a cache's lengths and block table.
#pragma once

#include "cuda/host/decode_params.h"
#include "cuda_backend.h"

namespace pasa {

bool cuda_plan_is_decode(const CudaPlan& plan);
int cuda_plan_device(const CudaPlan& plan);
// run_cuda_plan for a decode plan whose keys are `cache`'s (args.k, args.v: the cache tensors).
void run_cuda_decode_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace,
                          const cuda::KvCacheRead& cache);

}  // namespace pasa
