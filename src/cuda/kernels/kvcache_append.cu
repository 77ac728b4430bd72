// SPDX-License-Identifier: Apache-2.0
#include <cuda_runtime.h>

#include <string>

#include "cuda/arch/cuda_check.h"
#include "cuda/arch/ptx.cuh"
#include "cuda/host/kvcache_append.h"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

constexpr int kWarpsPerCta = 4;

// Where position `pos` of sequence b lives in the cache (element offset of its head-0 row), or -1
// where it is outside the cache.
__device__ __forceinline__ long long cache_row(const KvAppendParams& p, const CacheOperand& c, int b, int pos) {
  if (pos < 0 || pos >= p.capacity) return -1;
  const KvCacheRead& kv = p.cache;
  if (kv.block_table == nullptr) return b * c.stride_b + static_cast<long long>(pos) * c.stride_s;
  const int block = kv.block_table[static_cast<long long>(b) * kv.max_blocks + (pos >> kv.block_shift)];
  if (block < 0 || block >= kv.num_blocks) return -1;
  return block * c.stride_b + static_cast<long long>(pos & ((1 << kv.block_shift) - 1)) * c.stride_s;
}

__device__ __forceinline__ void copy_row(const KvAppendParams& p, const Operand& src, const CacheOperand& dst,
                                         int b, int h, int i, int lane) {
  const int cached = min(p.cache.seqlens[b], p.capacity);  // (cached + i cannot overflow)
  const long long at = cached < 0 ? -1 : cache_row(p, dst, b, cached + i);
  if (at < 0) return;
  const char* from = static_cast<const char*>(src.data) +
                     (b * src.stride_b + h * src.stride_h + static_cast<long long>(i) * src.stride_s) * p.elem_bytes;
  char* to = static_cast<char*>(dst.data) + (at + h * dst.stride_h) * p.elem_bytes;
  const int chunks = p.head_dim * p.elem_bytes / 16;
  for (int c = lane; c < chunks; c += 32) {
    reinterpret_cast<uint4*>(to)[c] = reinterpret_cast<const uint4*>(from)[c];
  }
}

__global__ void __launch_bounds__(32 * kWarpsPerCta) kvcache_append_kernel(const __grid_constant__ KvAppendParams p) {
  allow_dependent_grid();  // the decode kernel's CTAs may start; they wait for this grid's writes
  const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerCta + threadIdx.x / 32;
  if (row >= static_cast<long long>(p.batch) * p.heads_kv * p.s_new) return;
  const int i = static_cast<int>(row % p.s_new);
  const int h = static_cast<int>(row / p.s_new % p.heads_kv);
  const int b = static_cast<int>(row / p.s_new / p.heads_kv);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  copy_row(p, p.k_new, p.k_cache, b, h, i, lane);
  copy_row(p, p.v_new, p.v_cache, b, h, i, lane);
}

}  // namespace

void launch_kvcache_append(const KvAppendParams& p, void* stream) {
  const long long rows = static_cast<long long>(p.batch) * p.heads_kv * p.s_new;
  if (rows == 0) return;
  constexpr long long kMaxRows = ((1ll << 31) - 1) * kWarpsPerCta;  // (grid.x is at most 2^31 - 1)
  if (rows > kMaxRows) {
    throw Error("kvcache append: " + std::to_string(rows) + " new rows (B H_kv S_new); one launch takes at most " +
                std::to_string(kMaxRows));
  }
  const dim3 grid(static_cast<unsigned>((rows + kWarpsPerCta - 1) / kWarpsPerCta));
  kvcache_append_kernel<<<grid, 32 * kWarpsPerCta, 0, static_cast<cudaStream_t>(stream)>>>(p);
  check_launch("kvcache_append_kernel launch");
}

}  // namespace pasa::cuda
