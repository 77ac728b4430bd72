// SPDX-License-Identifier: Apache-2.0
// What pasa::attention_with_kvcache and KVCachePlan share: the checks of a call's tensors and options
// (no index value read), and the cache as the GPU backend takes it.
#pragma once

#include <cstdint>

#include "attention_checks.h"
#include "cuda_backend.h"
#include "pasa/serving.h"

namespace pasa {

struct KVCacheProblem {
  AttentionArgs whole;  // q, o, lse and the options; k and v: one sequence's cache of full capacity
  ProblemShape shape;
  std::int64_t s_new;   // positions appended (0: no k, v)
  bool on_gpu;
};

// The caches, the new keys, q, o, lse and the options, as attention_with_kvcache checks them before it
// reads cache_seqlens or the block table. Throws pasa::Error naming the argument.
KVCacheProblem check_kvcache_tensors(const KVCacheArgs& args);

// args.options with args' q, o and lse: the call as the dense API sees it, without keys.
AttentionArgs call_options(const KVCacheArgs& args);

// args' cache as the GPU backend reads it.
CudaKvCache cuda_kv_cache(const KVCacheArgs& args);

}  // namespace pasa
