// SPDX-License-Identifier: Apache-2.0
// pasa/serving.h — the layouts serving engines use, with flash-attn's names: packed variable-length
// batches (cu_seqlens) and KV caches (paged with a block table, or dense), with an optional append of
// new keys and values. Each sequence's result is the one pasa::attention gives on that sequence alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pasa/attention.h"

namespace pasa {

// Packed tokens [total, H, D] (flash-attn's varlen q, k, v, out) as the [1, H, total, D] view the
// rest of the API reads: a batch of one whose sequence axis holds every sequence back to back.
TensorView packed_view(void* data, DType dtype, std::int64_t total, std::int64_t H, std::int64_t D,
                       Device device = Device::cpu);

// Variable-length (packed) attention: sequence b owns query tokens [cu_seqlens_q[b],
// cu_seqlens_q[b + 1]) and keys [cu_seqlens_k[b], cu_seqlens_k[b + 1]). A sequence may be empty, and
// so may the whole batch (total_q or total_k 0: an empty view's data pointer is not read); a query row
// with no visible key gives O = 0, LSE = -inf. Query tokens past cu_seqlens_q[B] are not written.
// Errors name the packed tensors as [total, H, D] and their elements as [token, head, dim].
struct VarlenArgs {
  TensorView q;  // [1, H_q, total_q, D] (packed_view)
  TensorView k;  // [1, H_kv, total_k, D]
  TensorView v;  // [1, H_kv, total_k, D]
  TensorView o;  // [1, H_q, total_q, D], written
  LseView lse;   // [1, H_q, total_q] (lse_view(data, 1, H_q, total_q)), written when data is set
  const std::int32_t* cu_seqlens_q = nullptr;  // [batch + 1], non-decreasing, from >= 0 to <= total_q
  const std::int32_t* cu_seqlens_k = nullptr;  // [batch + 1], non-decreasing, up to <= total_k
  std::int64_t batch = 0;
  std::int64_t max_seqlen_q = 0;  // at least every sequence's query length
  std::int64_t max_seqlen_k = 0;  // at least every sequence's key length
  // scale, causal, alignment, policy, backend, stream, stats (summed over the sequences) and every
  // other option of AttentionArgs are read from here and applied to each sequence; its tensors are
  // ignored. A mask is refused (pasa::Error): one mask cannot follow the sequences' lengths.
  AttentionArgs options;
};

// Attention of q against a KV cache (flash-attn's flash_attn_with_kvcache). With k and v set, their
// S_new tokens are first written into the cache at positions cache_seqlens[b] .. + S_new - 1 of
// sequence b; then q attends to the first cache_seqlens[b] + S_new positions (causal: bottom-right
// aligned by default, so query i sees keys <= i + that length - S_q).
//   paged: position p of sequence b lives in block block_table[b * max_blocks + p / block_size],
//          slot p % block_size. Blocks may be shuffled and shared between sequences (a common prefix).
//   dense (block_table null): k_cache has B rows of S_max positions; sequence b is row b.
struct KVCacheArgs {
  TensorView q;        // [B, H_q, S_q, D]
  TensorView k_cache;  // paged [num_blocks, H_kv, block_size, D] (bshd_view of flash-attn's
                       // [num_blocks, block_size, H_kv, D]); dense [B, H_kv, S_max, D]
  TensorView v_cache;  // the same shape as k_cache
  TensorView k;        // optional new keys [B, H_kv, S_new, D] (data null: no append), k_cache's dtype
  TensorView v;        // optional new values, the same shape as k
  TensorView o;        // [B, H_q, S_q, D], written
  LseView lse;         // [B, H_q, S_q], written when data is set
  const std::int32_t* cache_seqlens = nullptr;  // [B]: positions already in the cache
  const std::int32_t* block_table = nullptr;    // [B, max_blocks] row-major; null for a dense cache
  std::int64_t max_blocks = 0;                  // block_table's row length
  AttentionArgs options;  // as in VarlenArgs
};

// Host tensors run on the CPU emulator (every policy). Both throw pasa::Error naming the argument
// before anything is written (the cache included) for: options.mask set, a cu_seqlens that decreases or leaves the
// packed tensors, a sequence longer than max_seqlen, a cache_seqlens below 0, a block id outside
// [0, num_blocks), an append that does not fit in the cache, two sequences whose appends write a block
// another sequence reads, an append whose v_cache is k_cache itself, non-finite values in what is read
// or values that overflow the policy's input format (host tensors), and everything pasa::attention
// rejects.
//
// Device tensors run on the GPU, on options.stream; cu_seqlens, cache_seqlens and block_table are then
// device arrays (int32, on q's device).
//   attention_varlen: copies both cu_seqlens to the host (waiting for the stream), checks them, and
//     runs each sequence as the dense pasa::attention call on its slices (every policy the dense GPU
//     call takes). Reading the offsets on the host cannot be captured in a CUDA graph: a call on a
//     capturing stream throws.
//   attention_with_kvcache: the split-KV decode kernel reads the cache in place, paged or dense, each
//     sequence to its own length, after a kernel that appends k, v; S_q <= 16 and the decode kernel's
//     policies (exact, fdpp), a power-of-two block size, and k_cache and v_cache with equal strides. The index arrays are copied to the host and checked first (waiting for
//     the stream), except on a stream being captured into a CUDA graph: there nothing waits, and
//     the kernels instead read a block id outside [0, num_blocks) as zero keys, and clamp lengths to
//     the cache (the result of such a call is undefined, but no memory outside the tensors is
//     touched). Its plan (kernel, split count) depends on the cache's capacity, not on cache_seqlens,
//     so a captured graph replays correctly with new cache_seqlens and block_table values.
void attention_varlen(const VarlenArgs& args);
void attention_with_kvcache(const KVCacheArgs& args);

// attention_with_kvcache's checks and decisions made once, for a serving loop's decode step: run()
// launches only (GPU: no index check, no allocation, no device query but the current device's number,
// no synchronization but for an fdpp call's stats, refused while capturing), so it can be captured in
// a CUDA graph, which replays with whatever cache_seqlens and block_table then hold. On
// the GPU, bad index values in a run() are undefined behaviour within the tensors (see above: the
// kernels read an out-of-range block as zero keys and clamp lengths); check them where they are made.
// On host tensors, run() is attention_with_kvcache (the emulator checks everything on every call).
class KVCachePlan {
 public:
  // Checks `args` as attention_with_kvcache does, except the index arrays' values and, on the GPU, the
  // pointers' memory kind; only the problem is kept, not the pointers. Throws pasa::Error.
  explicit KVCachePlan(const KVCacheArgs& args);

  // Bytes of device workspace run() needs on the GPU (0: none, and always 0 on the CPU).
  std::size_t workspace_bytes() const;

  // Runs `args`, which must describe the plan's problem: only the data pointers (the index arrays'
  // too), the stream and the stats may differ (anything else: pasa::Error naming the field, nothing
  // launched). `workspace`: at least workspace_bytes(), 256-byte aligned, used by one run at a time.
  void run(const KVCacheArgs& args, void* workspace = nullptr) const;

 private:
  struct State;
  const State& state() const;  // (a moved-from plan: pasa::Error)
  std::shared_ptr<const State> state_;
};

}  // namespace pasa
