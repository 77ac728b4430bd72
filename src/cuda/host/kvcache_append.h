// SPDX-License-Identifier: Apache-2.0
// The KV-cache append (flash-attn's flash_attn_with_kvcache with k, v): the new keys and values of
// sequence b go to its positions cache_seqlens[b] .. + S_new - 1, paged or dense, before the decode
// kernel reads the cache. Plain C++: included by .cpp and .cu files alike.
#pragma once

#include <cstdint>

#include "cuda/host/decode_params.h"

namespace pasa::cuda {

// A cache tensor as the append writes it: [block (or sequence), H_kv, slot, D] element strides.
struct CacheOperand {
  void* data;
  std::int64_t stride_b, stride_h, stride_s;
};

struct KvAppendParams {
  Operand k_new, v_new;         // [B, H_kv, S_new, D]
  CacheOperand k_cache, v_cache;
  KvCacheRead cache;            // seqlens, and the block table of a paged cache
  int capacity;                 // positions a sequence can hold
  int batch, heads_kv, s_new, head_dim;
  int elem_bytes;               // the cache's (and the new keys') element size
};

// One row (sequence, head, new position) per warp, 16 bytes per lane and step; a position past the
// capacity or in a block id outside [0, num_blocks) is not written (the host checks for those before
// launching, except under graph capture). Throws pasa::Error on a launch error.
void launch_kvcache_append(const KvAppendParams& p, void* stream);

}  // namespace pasa::cuda
