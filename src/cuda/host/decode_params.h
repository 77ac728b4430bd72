// SPDX-License-Identifier: Apache-2.0
// The split-KV decode path (S_q <= 16): its tile table, what the host passes to its two kernels, and
// their launch functions. Plain C++: included by .cpp and .cu files alike.
//
// One CTA = (split, K/V head and row chunk, batch). The query rows of one K/V head's GQA group are
// packed together, packed row r = (query head within the group) * S_q + query index, so that all the
// heads that share K/V read it once, as the rows of one m16 MMA tile (two tiles per CTA when the group
// has more than 16 rows; more rows take more row chunks). The CTA's four warps split each K / V tile
// between them (FlashDecoding inside the CTA) and combine their partial results through shared memory
// at the end. Each split writes O~ (unnormalised, fp32), m and l to a workspace, and the partials of
// a group are combined exactly (algorithms.md section 1): O = sum_p w_p O~_p / sum_p w_p l_p with
// w_p = 2^(m_p - M), by one of two launches that give the same bits (one merge function whose
// arithmetic an item's splits fix, however its threads share them: decode_merge.cuh):
// - eager calls: the group's last split to finish merges it (each split takes a ticket from its
//   group's counter in the workspace, launch_counter.cuh): one launch a call, where the host's launch
//   time (3.4-4.8 us on the H200's host) is more than the 1.9-2.1 us of GPU time the tail costs at B 1;
// - calls captured into a CUDA graph (no host time per replay): the merge kernel after the split
//   kernel, whose kernel boundary costs the GPU less than the tail's arrival (bench/NOTES.md,
//   twenty-seventh session).
// With FlashDecoding++'s unified max (algorithms.md section 5) a split's m_p is phi, so the weights of
// such partials are exactly 1; a CTA where some row's x - phi left the window runs its split again
// with the running max, and its partial carries that max (the merge weighs both kinds alike). One
// split: the CTAs write O and the LSE themselves, unified max or not.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

struct DecodeTile {
  int head_dim;
  int block_n;      // keys per K / V tile; each of the 4 warps takes block_n / 4 of them (16 or more)
  int stages;       // K / V tiles in flight (cp.async ring)
  int ctas_per_sm;  // what the shared memory allows (the launch bounds ask for it)
  int l2_prefetch;  // 0, or 64 / 128 / 256: the cp.async's L2 prefetch size hint
  bool swizzled_kv;  // K / V rows in shared memory unpadded and swizzled, else padded (smem_rows.cuh)

  static constexpr int kWarps = 4;
  constexpr int threads() const { return 32 * kWarps; }
  constexpr int warp_keys() const { return block_n / kWarps; }
  constexpr int smem_stride() const { return head_dim + 8; }  // elements a Q row: 16 bytes of padding
  constexpr int kv_row_elems() const { return swizzled_kv ? head_dim : smem_stride(); }
  constexpr int smem_bytes(int m_tiles) const {
    return (16 * m_tiles * smem_stride() + 2 * stages * block_n * kv_row_elems()) * 2;
  }
  // m16 row tiles a CTA may take: two up to head dim 128; one at 256, where a tile's fp32 O alone is
  // 128 registers a thread.
  constexpr int max_m_tiles() const { return head_dim <= 128 ? 2 : 1; }
};

// Shapes (H200; bench/NOTES.md, run 3 and the twenty-sixth session): 64-key tiles; three stages at
// head dim 128 (100-105 KB of shared memory, two CTAs per SM, two tiles = 64 KB of loads in flight per
// CTA; two or four stages within 1-2% of it) with the .L2::128B prefetch hint (+2-2.5% at B 64 with
// padded rows, the same as none with swizzled ones; .L2::256B loses 7-9%); four stages at head dim 64
// (66-68 KB; not measured separately). Head dims 96 and 256 are sized, not measured: 96 takes 128's
// three stages (81-85 KB); 256 two stages and one m-tile (136 KB: one CTA per SM, on the GPUs that
// grant a CTA that much, A100 and H100 / H200; the dispatch checks). K and V rows are swizzled
// wherever the head dim is a multiple of 64 (all but 96): a padded row splits each warp's copy of a
// 128-byte line in two (+5-6% at B 64 swizzled).
constexpr DecodeTile decode_tile(int head_dim) {
  switch (head_dim) {
    case 64: return DecodeTile{64, 64, 4, 2, 0, true};
    case 96: return DecodeTile{96, 64, 3, 2, 0, false};
    case 256: return DecodeTile{256, 64, 2, 1, 0, true};
    default: return DecodeTile{128, 64, 3, 2, 128, true};
  }
}

// Variants the benchmark times beside the tuned shape (bench/decode_variants.cu; head dim 128, bf16,
// one m-tile), one lever each (bench/NOTES.md, run 3).
enum class DecodeVariant : int {
  tuned = 0,
  stages2 = 1,      // two stages: one tile in flight while the CTA computes (still 2 CTAs per SM)
  stages4 = 2,      // four stages (143 KB): one CTA per SM, three tiles in flight
  no_prefetch = 3,  // cp.async without an L2 prefetch hint (run 3a's tuned shape)
  prefetch256 = 4,  // the .L2::256B hint
  padded_kv = 5,    // K / V rows padded by 16 bytes instead of swizzled
};
constexpr int kDecodeVariants = 6;

constexpr DecodeTile decode_variant_tile(DecodeTile t, DecodeVariant v) {
  switch (v) {
    case DecodeVariant::tuned: break;
    case DecodeVariant::stages2: t.stages = 2; break;
    case DecodeVariant::stages4: t.stages = 4; t.ctas_per_sm = 1; break;
    case DecodeVariant::no_prefetch: t.l2_prefetch = 0; break;
    case DecodeVariant::prefetch256: t.l2_prefetch = 256; break;
    case DecodeVariant::padded_kv: t.swizzled_kv = false; break;
  }
  return t;
}

// The tile a device whose CTAs may opt in to `max_smem` bytes of shared memory runs: decode_tile's,
// or where that does not fit (head dim 128 on the 99 KiB of sm_86, sm_89 and sm_120: A10, L4, L40S,
// the RTX cards), the stages2 variant's (68-73 KiB). The caller refuses a tile that still does not
// fit (head dim 256 there: one 64-key stage of K and V is 64 KiB, and a ring needs two).
constexpr DecodeTile decode_tile_for(int head_dim, int m_tiles, int max_smem) {
  const DecodeTile tuned = decode_tile(head_dim);
  if (head_dim != 128 || tuned.smem_bytes(m_tiles) <= max_smem) return tuned;
  return decode_variant_tile(tuned, DecodeVariant::stages2);
}
constexpr bool decode_tile_is_compact(const DecodeTile& t) { return t.stages < decode_tile(t.head_dim).stages; }

constexpr int kDecodeHeadDims[] = {64, 96, 128, 256};  // the head dims decode_tile has shapes for
constexpr int kDecodeMaxSeqQ = 16;     // the decode path takes S_q <= this

// Where a decode call's keys live when they are a KV cache (pasa/serving.h): each sequence's own
// length, and for a paged cache the block table. Device arrays; all null for a dense [B, H_kv, S_kv, D]
// K / V whose every sequence has S_kv keys.
struct KvCacheRead {
  const int* seqlens = nullptr;  // [B]: positions cached before this call; null: S_kv for every sequence
  int appended = 0;              // positions this call appended after them
  bool bottom_right = true;      // causal offset of sequence b: its length - S_q (else 0)
  // Paged: key n of sequence b is slot n % block_size of block block_table[b max_blocks + n / block_size],
  // and K / V's batch stride steps a block (K and V have the same strides). The block size is a power
  // of two, 2^block_shift. A block id outside [0, num_blocks) reads as zero keys.
  const int* block_table = nullptr;
  int max_blocks = 0, block_shift = 0, num_blocks = 0;
};

struct DecodeParams {
  FwdParams fwd;     // Q, K, V, O, LSE, S_q, S_kv (a cache: its capacity), heads, group, causal,
                     // scale_log2, negate_q
  KvCacheRead cache;
  int heads_kv;
  int rows;          // packed rows of one K/V head: group * seq_q
  int row_chunks;    // CTAs along the packed rows: ceil(rows / (16 m_tiles))
  int splits;        // key ranges of each sequence (decode_split_keys)
  bool direct;       // one split: the CTA writes O and the LSE itself
  bool merge_in_last_split;  // (several splits) the group's last split merges it, else the merge kernel
  int chunk_rows;    // packed rows a CTA takes: 16 m_tiles
  bool round_s;      // fdpp: scores leave the Q K^T GEMM rounded to fp16 (the policy's s format)
  bool unified;      // fdpp: P = e^(x - phi) for every split; rows with an x - phi outside the
                     // window are flagged, and their CTA runs its split again with the running max
  float alpha;       // |alpha| (x = alpha s for the window test; a zero alpha runs as 1e-30)
  float phi;         // the unified max, fp32
  float phi_log2;    // phi log2(e): P = 2^(s |alpha| log2 e - phi log2 e)
  float window_lo, window_hi;

  // Workspace (from pasa's pool), R = B H_kv rows packed rows, row index (b H_kv + h_kv) rows + r.
  float* part_o;     // [splits][R][D]: the split's O~ (unnormalised)
  float* part_ml;    // [splits][R][2]: m (base-2 units, -inf for no visible key), l
  int* part_flag;    // [splits][R]: some visible x - phi of the split left the window
  std::uint64_t* arrivals;  // [B][H_kv row_chunks]: each group's launch counter (no initialization needed)
  int* counter;      // null, or the rows some split flagged are counted here (zeroed before the launch)
};

// What the decode plan depends on: the shape and the split count the policy asks for.
struct DecodeShape {
  int batch, heads_kv, group, seq_q, seq_kv, head_dim;
  bool unified;       // FlashDecoding++'s unified max (needs the workspace even with one split)
  int policy_splits;  // > 1: the policy fixes the split count; otherwise chosen from the shape
};

// The m16 row tiles a CTA of `head_dim` takes for `rows` packed rows: one for up to 16, else the
// tile's max_m_tiles.
constexpr int decode_m_tiles(int head_dim, long long rows) {
  return rows <= 16 ? 1 : decode_tile(head_dim).max_m_tiles();
}

// The host decisions of one decode shape (decode_dispatch.cpp), taken once: the packed rows, the
// split count and the workspace layout.
struct DecodePlan {
  int rows, m_tiles, row_chunks, splits;
  bool compact;  // decode_tile_for chose the stages2 tile (the device grants less shared memory)
  bool direct;  // one split: the CTAs write O and the LSE; the workspace holds the counter only
  std::size_t o_bytes, ml_bytes, flag_bytes, arrival_bytes;  // the workspace's arrays, 256-aligned (none when direct)
  std::size_t workspace_bytes;
};
DecodePlan plan_decode(const DecodeShape& shape, int sm_count, int max_smem);

// One decode call's arguments (the pointers and the policy's numbers).
struct DecodeRequest : KernelRequest {
  KvCacheRead cache;    // a KV cache's lengths and block table (default: dense K / V of S_kv keys)
  bool fdpp_formats;    // the fdpp policy's formats: fp16 scores, bf16 inputs rounded to fp16
  bool unified;         // FlashDecoding++'s unified max (fdpp_formats too)
  double phi, window_lo, window_hi;
};

// Launches the decode path on `stream` into `workspace` (plan.workspace_bytes, 256-byte aligned; not
// used by another call in flight). Returns the number of rows whose x - phi left the window (their
// splits recomputed with the running max) when `count_recomputed` (which then waits for the stream:
// the count lives on the device), else 0 with no synchronization, allocation or device query.
long long run_decode(const DecodePlan& plan, const DecodeRequest& r, void* workspace,
                     bool count_recomputed, void* stream);

// The keys of one split of a sequence of `seq_kv` keys cut into `splits` ranges of whole tiles: split z
// covers [z k, min((z + 1) k, seq_kv)) for k = decode_split_keys(seq_kv, splits, block_n). The kernel
// cuts each sequence's own length (a KV cache's lengths are read on the device): a cache longer than
// its sequences spreads their keys over every split, as flash-attn's split-KV kernel does, instead of
// leaving the splits past the lengths idle.
constexpr int decode_split_keys(int seq_kv, int splits, int block_n) {
  const int per_split = (seq_kv + splits - 1) / splits;
  return (per_split + block_n - 1) / block_n * block_n;
}

// Splits of the key axis for `base_ctas` CTAs per split: enough CTAs to fill sm_count SMs at
// ctas_per_sm each, in whole waves where possible, each split at least two key tiles.
int choose_decode_splits(long long base_ctas, int seq_kv, int block_n, int sm_count, int ctas_per_sm);

// Launch functions (attention_decode.cu); each throws pasa::Error on a CUDA error. The split kernel:
// splits x (H_kv row_chunks) x batch CTAs of decode_tile(head_dim), or of its compact tile (the plan's
// `compact`); m_tiles as decode_m_tiles gives it (1 or 2); in_type f16 or bf16; to_half: bf16 inputs
// rounded to fp16 on their way into the MMAs (the fdpp policy's input format). dependent: launched as a
// programmatic dependent of the kernel before it (KernelRequest::dependent_launch).
void launch_decode_split(const DecodeParams& p, int batch, int head_dim, int m_tiles, bool compact,
                         ElemType in_type, bool to_half, bool dependent, void* stream);
// The merge kernel (after a split kernel with merge_in_last_split off): a CTA per packed row, counting
// the flagged rows when p.counter is set.
void launch_decode_merge(const DecodeParams& p, int batch, int head_dim, bool dependent, void* stream);

}  // namespace pasa::cuda
