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

// What the call writes against what it reads (memory_overlap.h): o and lse each a distinct element per
// index and apart from every other tensor; with an append (`appends`), the caches, written then, a
// distinct element per index and apart from q, k and v; both apart from cache_seqlens and the first
// entry of each block-table row (check_index_memory). Throws pasa::Error naming both.
void check_kvcache_memory(const KVCacheArgs& args, bool appends);
// o, lse and (when the call appends) both caches apart from the index arrays the call reads as it
// writes: cache_seqlens [B] and the first `table_entries` entries of each row of the block table.
void check_index_memory(const KVCacheArgs& args, bool appends, std::int64_t table_entries);

// args.options with args' q, o and lse: the call as the dense API sees it, without keys.
AttentionArgs call_options(const KVCacheArgs& args);

// args' cache as the GPU backend reads it.
CudaKvCache cuda_kv_cache(const KVCacheArgs& args);

}  // namespace pasa
