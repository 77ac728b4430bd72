// SPDX-License-Identifier: Apache-2.0
// The split-KV decode kernel (S_q <= 16; decode_params.h has the CTA layout and the workspace):
// memory-bound, so the design goal is to read K and V once, at HBM bandwidth. One CTA = one key
// range (split) of one K/V head for 16 or 32 packed query rows (the heads of the GQA group times
// S_q); K / V tiles stream through a ring of cp.async stages (two tiles in flight at head dim 128);
// each of the four warps takes a quarter of every tile's keys, so the tensor cores see every key once
// (Q K^T and P V on mma.sync m16n8k16, the prefill kernel's warp_mma pieces), and each warp runs its
// own online softmax over its keys. At the end the warps combine through shared memory and the CTA
// writes either O and the LSE (one split) or its partial (O~, m, l, window flag) to the workspace,
// which the last split of a group (batch, K/V head, row chunk) to finish merges, or the merge kernel
// after it (decode_params.h says when which).
//
// Modes (runtime, uniform per launch): exact (running max, FlashAttention-2's step); fdpp's formats
// (round_s: scores leave the GEMM rounded to fp16; bf16 inputs rounded to fp16 by the kToHalf
// instantiation: Q once in shared memory, K's and V's fragments as ldmatrix reads them); unified
// (FlashDecoding++: P = e^(x - phi) with no running max, rows whose visible x - phi leave the window
// flagged, and a CTA holding such a row runs its split again with
// the running max before it writes anything).
//
// Shape: a cp.async ring of 64-key tiles, K and V rows swizzled in shared memory (smem_rows.cuh: a
// padded row split each warp's 128-byte lines, 2.6x the L2 requests; swizzled, 4.35-4.61 TB/s at B 64
// against 4.13-4.36 padded), Q fragments in registers for one m-tile (up to head dim 128), the keys of
// a tile split among the warps. B 64, 32/8 heads, d 128, bf16 on the H200: 1.00x cuDNN through the API
// under CUDA graphs (bench/NOTES.md, twenty-sixth session); the stage count (2, 3 or 4) moves it by
// 1-2%.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/once_per_device.h"
#include "cuda/host/decode_params.h"
#include "cuda/host/launch_dependent.h"
#include "cuda/block/decode_merge.cuh"
#include "cuda/block/fwd_mask.cuh"
#include "cuda/block/online_softmax.cuh"
#include "cuda/arch/ptx.cuh"
#include "cuda/pipeline/launch_counter.cuh"
#include "cuda/pipeline/tile_load.cuh"
#include "cuda/arch/warp_mma.cuh"

namespace pasa::cuda {

// Sequence b's keys: their count (a KV cache: its cached length plus the append, clamped to the
// cache's capacity S_kv) and the causal offset that goes with it.
struct SequenceKeys {
  int seq_kv, causal_offset;
};
__device__ __forceinline__ SequenceKeys sequence_keys(const DecodeParams& p, int b) {
  const FwdParams& f = p.fwd;
  if (p.cache.seqlens == nullptr) return {f.seq_kv, f.causal_offset};
  const int len = min(min(max(p.cache.seqlens[b], 0), f.seq_kv) + p.cache.appended, f.seq_kv);  // (no overflow)
  return {len, p.cache.bottom_right ? len - f.seq_q : f.causal_offset};
}

// How the decode kernel finds its key rows: a dense operand's are one stride apart; a paged cache's
// are looked up in the block table, once per row for K and V together (the host checks that their
// strides agree), with shifts for the power-of-two block size. The lookups of a tile are issued one
// step before its copies (look_up, then load), so that their latency overlaps the wait for the tile
// before.
template <int kRows, int kHeadDim, int kThreads, int kPrefetch, typename Elem, class SmemRows>
struct KeyRows {
  using Rows = ThreadRows<kRows, kHeadDim, kThreads>;
  const DecodeParams& p;
  int b;
  const Elem* k_head;
  const Elem* v_head;
  int block[Rows::kCount];  // the looked-up block ids of this thread's rows (paged), -1: none

  __device__ KeyRows(const DecodeParams& params, int batch, int h_kv)
      : p(params), b(batch),
        k_head(static_cast<const Elem*>(params.fwd.k.data) + h_kv * params.fwd.k.stride_h),
        v_head(static_cast<const Elem*>(params.fwd.v.data) + h_kv * params.fwd.v.stride_h) {}

  __device__ __forceinline__ bool paged() const { return p.cache.block_table != nullptr; }

  // The block ids of rows [n0, n0 + valid) (paged caches; nothing for a dense operand).
  __device__ __forceinline__ void look_up(int n0, int valid) {
    if (!paged()) return;
    const int* table = p.cache.block_table + static_cast<std::int64_t>(b) * p.cache.max_blocks;
#pragma unroll
    for (int i = 0; i < Rows::kCount; ++i) {
      const int row = Rows::row(i);
      block[i] = (Rows::kRegular || row >= 0) && row < valid ? table[(n0 + row) >> p.cache.block_shift] : -1;
    }
  }

  // The copies of rows [n0, n0 + valid) (rows past `valid` zero-filled), after look_up(n0, valid).
  __device__ __forceinline__ void load(Elem* smem_k, Elem* smem_v, int n0, int valid) const {
    const Operand& k = p.fwd.k;
    const Operand& v = p.fwd.v;
    if (!paged()) {
      const std::int64_t k_row0 = b * k.stride_b + static_cast<std::int64_t>(n0) * k.stride_s;
      const std::int64_t v_row0 = b * v.stride_b + static_cast<std::int64_t>(n0) * v.stride_s;
      load_tile_async<kRows, kHeadDim, kThreads, Elem, kPrefetch, SmemRows>(smem_k, k_head + k_row0, k.stride_s, valid);
      load_tile_async<kRows, kHeadDim, kThreads, Elem, kPrefetch, SmemRows>(smem_v, v_head + v_row0, v.stride_s, valid);
      return;
    }
    // A row is read where its block id is one of the cache's (-1, a row past `valid`, is not: one
    // unsigned test for both); its offset is formed either way, the copy ignores it where not read.
    const int slot_mask = (1 << p.cache.block_shift) - 1;
    const auto num_blocks = static_cast<unsigned>(p.cache.num_blocks);
    std::int64_t offset[Rows::kCount];
    bool inside[Rows::kCount];
#pragma unroll
    for (int i = 0; i < Rows::kCount; ++i) {
      inside[i] = static_cast<unsigned>(block[i]) < num_blocks;
      offset[i] = block[i] * k.stride_b + ((n0 + Rows::row(i)) & slot_mask) * k.stride_s;
    }
    load_rows_async<kRows, kHeadDim, kThreads, Elem, kPrefetch, SmemRows>(smem_k, smem_v, k_head, v_head, offset, inside);
  }
};

// The tile of an instantiation, as a type (C++17 has no class-type template parameters).
template <int kHeadDim, int kVariant = 0>
struct DecodeTileOf {
  static constexpr DecodeTile value = decode_variant_tile(decode_tile(kHeadDim), static_cast<DecodeVariant>(kVariant));
};

// kMergeInLastSplit: the instantiation whose last split of a group merges it (p.merge_in_last_split).
// The other, which the merge kernel follows, is the split kernel alone (192 registers a thread at
// d 128, where the merge takes 254).
template <class TileOf, int kMTiles, typename InElem, bool kToHalf, bool kMergeInLastSplit>
__global__ void __launch_bounds__(DecodeTile::kWarps * 32, TileOf::value.ctas_per_sm)
    attention_decode_kernel(const __grid_constant__ DecodeParams p) {
  constexpr DecodeTile kT = TileOf::value;
  constexpr int kHeadDim = kT.head_dim;
  constexpr int kBlockN = kT.block_n;
  constexpr int kStages = kT.stages;
  constexpr int kThreads = kT.threads();
  constexpr int kWarps = DecodeTile::kWarps;
  constexpr int kStride = kT.smem_stride();
  constexpr int kWarpKeys = kT.warp_keys();
  constexpr int kNTiles = kWarpKeys / 8;   // n8 score tiles of a warp's keys
  constexpr int kNChunks = kWarpKeys / 16; // k16 steps of its P V
  constexpr int kDTiles = kHeadDim / 8;
  constexpr int kDChunks = kHeadDim / 16;
  constexpr int kRows = 2 * kMTiles;       // rows per thread
  constexpr int kBlockM = 16 * kMTiles;    // packed rows per CTA
  // Q stays in registers for one m-tile up to head dim 128 (at 256, its 64 registers and O's 128 would
  // not fit in 255).
  constexpr bool kQInRegs = kMTiles == 1 && kHeadDim <= 128;
  constexpr int kKvRow = kT.kv_row_elems();  // elements a K / V row takes in shared memory
  constexpr std::uint32_t kTileBytes = kBlockN * kKvRow * 2;
  static_assert(kStride == smem_row_stride<kHeadDim>(), "tile_load and the tile table agree on padding");
  using QRows = PaddedRows<kStride>;
  using KvRows = TileRows<kT.swizzled_kv, kHeadDim>;
  static_assert(kStages >= 2 && kWarpKeys % 16 == 0, "a ring of stages; whole k16 steps per warp");
  static_assert(!kToHalf || std::is_same_v<InElem, __nv_bfloat16>, "only bf16 inputs are converted");
  using MmaElem = std::conditional_t<kToHalf, __half, InElem>;

  // (128-byte aligned, as SwizzledRows needs; 16 padded Q rows take a multiple of 128 bytes at every
  // head dim, (D + 8) * 32, so K's and V's tiles start on such boundaries too)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  InElem* sQ = reinterpret_cast<InElem*>(smem_raw);         // [kBlockM][kStride]
  InElem* sK = sQ + kBlockM * kStride;                      // [kStages][kBlockN][kKvRow]
  InElem* sV = sK + kStages * kBlockN * kKvRow;             // [kStages][kBlockN][kKvRow]
  static_assert(!kT.swizzled_kv || (kBlockM * kStride * 2 % 128 == 0 && kTileBytes % 128 == 0 &&
                                    kWarpKeys * kKvRow * 2 % 128 == 0),
                "swizzled K / V tiles, stages and warp slices on 128-byte boundaries");

  wait_for_previous_grid();  // (a KV-cache call's append, or whatever kernel came before)
  const FwdParams& f = p.fwd;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int split = static_cast<int>(blockIdx.x);
  const int h_kv = static_cast<int>(blockIdx.y) % p.heads_kv;
  const int chunk = static_cast<int>(blockIdx.y) / p.heads_kv;
  const int b = static_cast<int>(blockIdx.z);
  const int r0 = chunk * kBlockM;                        // the CTA's first packed row
  const int r_last = min(r0 + kBlockM, p.rows) - 1;      // ... and its last valid one
  const std::int64_t head_row0 = (static_cast<std::int64_t>(b) * p.heads_kv + h_kv) * p.rows;  // row index base
  const SequenceKeys keys = sequence_keys(p, b);
  const int split_keys = decode_split_keys(keys.seq_kv, p.splits, kBlockN);  // (0 for no key)
  const int k_begin = split * split_keys;
  const int k_end = min(keys.seq_kv, k_begin + split_keys);

  // This thread's rows (r = 2 mt + i: packed row r0 + 16 mt + 8 i + lane / 4) and their visible key
  // ends within the split; padding rows (past p.rows) compute on Q = 0 and are never written.
  const auto row_of = [&](int r) { return r0 + 16 * (r / 2) + 8 * (r % 2) + lane / 4; };
  const auto real_row = [&](int r) { return row_of(r) < p.rows; };
  int limit[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    // (decode takes no window: the limit is the causal diagonal of the row's query)
    limit[r] = f.causal && real_row(r) ? min(k_end, row_of(r) % f.seq_q + keys.causal_offset + 1) : k_end;
  }
  // Keys [k_begin, n_end) are visible to some row of the CTA; keys below min_limit to all of them.
  int n_end = k_end, min_limit = k_end;
  if (f.causal) {
    int s_max = f.seq_q - 1;
    if (r_last - r0 + 1 < f.seq_q) {
      const int s_first = r0 % f.seq_q, s_last = r_last % f.seq_q;
      if (s_last >= s_first) s_max = s_last;
    }
    n_end = min(k_end, s_max + keys.causal_offset + 1);
    min_limit = min(k_end, keys.causal_offset + 1);
  }
  const int n_tiles = n_end > k_begin ? (n_end - k_begin + kBlockN - 1) / kBlockN : 0;

  KeyRows<kBlockN, kHeadDim, kThreads, kT.l2_prefetch, InElem, KvRows> key_rows(p, b, h_kv);
  const auto look_up = [&](int t) { key_rows.look_up(k_begin + t * kBlockN, k_end - k_begin - t * kBlockN); };
  const auto load_tile = [&](int t) {
    const int n0 = k_begin + t * kBlockN;
    const int stage = t % kStages;
    key_rows.load(sK + stage * kBlockN * kKvRow, sV + stage * kBlockN * kKvRow, n0, k_end - n0);
  };

  // Prologue: Q (packed rows gathered from their heads, zero past p.rows) and the first tiles, one
  // group per tile (Q rides with tile 0).
  constexpr int kQChunks = kBlockM * kHeadDim / 8;
  const InElem* gQ = static_cast<const InElem*>(f.q.data);
#pragma unroll
  for (int c = static_cast<int>(threadIdx.x); c < kQChunks; c += kThreads) {
    const int rr = c / (kHeadDim / 8), col = (c % (kHeadDim / 8)) * 8;
    const int row = r0 + rr;
    const bool valid = row < p.rows;
    const InElem* src = gQ;
    if (valid) {
      src = gQ + b * f.q.stride_b + packed_head(p, h_kv, row) * f.q.stride_h +
            static_cast<std::int64_t>(row % f.seq_q) * f.q.stride_s + col;
    }
    cp_async_16(smem_addr(sQ + rr * kStride + col), src, valid);
  }
  const auto load_first_tiles = [&] {  // one group per tile
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) {
      if (t < n_tiles) {
        look_up(t);
        load_tile(t);
      }
      cp_async_commit();
    }
  };
  load_first_tiles();
  // The group's arrival counter is this launch's before any split of the group arrives (the claim's
  // round trips under the copies in flight).
  std::uint64_t* group_counter =
      kMergeInLastSplit ? p.arrivals + (static_cast<std::int64_t>(b) * gridDim.y + blockIdx.y) : nullptr;
  if (kMergeInLastSplit && threadIdx.x == 0) claim_launch_counter(group_counter);
  cp_async_wait<kStages - 2>();  // Q and tile 0 have landed (this thread's copies)
  // Q in place, each thread on the chunks it copied: bf16 -> fp16 (fdpp's input format), and the
  // sign flip for a negative scale (the softmax scales by |alpha|).
#pragma unroll
  for (int c = static_cast<int>(threadIdx.x); c < kQChunks; c += kThreads) {
    const int rr = c / (kHeadDim / 8), col = (c % (kHeadDim / 8)) * 8;
    uint4* q4 = reinterpret_cast<uint4*>(sQ + rr * kStride + col);
    uint4 x = *q4;
    std::uint32_t* w = &x.x;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kToHalf) w[e] = bf16x2_to_half2(w[e]);
      if (f.negate_q) w[e] ^= 0x80008000u;
    }
    *q4 = x;
  }
  __syncthreads();

  const std::uint32_t q_addr = smem_addr(sQ) + a_lane_offset<QRows>(lane);
  const std::uint32_t k_addr = smem_addr(sK) + k_lane_offset<KvRows>(lane) + warp * kWarpKeys * kKvRow * 2;
  const std::uint32_t v_addr = smem_addr(sV) + v_lane_offset<KvRows>(lane) + warp * kWarpKeys * kKvRow * 2;
  std::uint32_t tSrQ[kQInRegs ? kDChunks : 1][4];
  if constexpr (kQInRegs) {
#pragma unroll
    for (int kk = 0; kk < kDChunks; ++kk) ldmatrix_x4(tSrQ[kk], QRows::moved(q_addr, 0, 2 * kk));
  }

  ExactSoftmax<kMTiles> exact;
  UnifiedSoftmax<kMTiles> unified;
  bool left[kRows];                            // unified: a visible x - phi left the window
  float tOrO[kMTiles][kDTiles][4];             // running O~ in fp32
  const int t4 = lane % 4;

  // One pass over the split's key tiles (the first tiles already in flight), with FlashDecoding++'s
  // unified max or the synchronized (running max) softmax.
  const auto run_tiles = [&](bool unified_max) {
    exact.init();
    unified.init();
#pragma unroll
    for (int r = 0; r < kRows; ++r) left[r] = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int n = 0; n < kDTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) tOrO[mt][n][e] = 0.0f;
    for (int j = 0; j < n_tiles; ++j) {
      const bool load_next = j + kStages - 1 < n_tiles;
      if (load_next) look_up(j + kStages - 1);  // (its latency runs under the wait below)
      if (j > 0) {
        cp_async_wait<kStages - 2>();  // tile j has landed (this thread's copies)
        __syncthreads();  // ... everyone's; and every warp is done with tile j - 1's stage
      }
      if (load_next) load_tile(j + kStages - 1);
      cp_async_commit();

      const std::uint32_t stage_off = (j % kStages) * kTileBytes;
      const int key0 = k_begin + j * kBlockN + warp * kWarpKeys;  // the warp's first key
      float tSrS[kMTiles][kNTiles][4] = {};
      warp_qk<kMTiles, kNTiles, kDChunks, QRows, KvRows, MmaElem, kQInRegs, InElem>(tSrS, q_addr, tSrQ,
                                                                              k_addr + stage_off);
      if (p.round_s) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int n = 0; n < kNTiles; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) tSrS[mt][n][e] = round_fp16(tSrS[mt][n][e]);
      }
      if (key0 + kWarpKeys > min_limit) mask_past_limits(tSrS, key0, [&](int r) { return limit[r]; });  // some key masked

      bool rescale_o = false;
      float rescale[kRows];
      if (unified_max) {
        // The window test on x = |alpha| s (Q's sign already carries alpha's), masked keys skipped.
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
          for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int n = 0; n < kNTiles; ++n)
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const float s = tSrS[mt][n][2 * i + e];
                const float d = s * p.alpha - p.phi;
                if (s != -INFINITY && !(d > p.window_lo && d < p.window_hi)) left[2 * mt + i] = real_row(2 * mt + i);  // (padding never sets it off)
              }
        unified.step(tSrS, f.scale_log2, p.phi_log2);
      } else {
        rescale_o = __any_sync(0xffffffffu, exact.step(tSrS, f.scale_log2, rescale));
      }

      std::uint32_t tOrP[kMTiles][kNChunks][4];
      scores_to_p_fragments<MmaElem>(tOrP, tSrS);
      if (rescale_o) scale_rows(tOrO, rescale);
      warp_pv<kMTiles, kNChunks, kDTiles, KvRows, MmaElem, InElem>(tOrO, tOrP, v_addr + stage_off);
    }
  };

  run_tiles(p.unified);
  // FlashDecoding++'s fallback, per CTA: where some row's x - phi left the window, the CTA runs its
  // split again with the synchronized softmax. Its partial then carries its own max, which the merge
  // weighs exactly like the unified partials' phi; the flags still say which rows left.
  bool flagged[kRows];
  bool unified_partial = p.unified;
  if (p.unified) {
    bool any_left = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      flagged[r] = left[r];
      any_left |= left[r];
    }
    if (__syncthreads_or(any_left)) {
      cp_async_wait<0>();
      __syncthreads();  // every warp is done with the stages
      load_first_tiles();
      cp_async_wait<kStages - 2>();
      __syncthreads();
      run_tiles(false);
      unified_partial = false;
    }
  } else {
#pragma unroll
    for (int r = 0; r < kRows; ++r) flagged[r] = false;
  }

  // The warps' partials (m, l, flag, O~) through shared memory (the stages are free once every
  // warp is done with the last tile).
  constexpr int kOStride = kHeadDim + 4;  // floats: rows 4 banks apart
  float* sO = reinterpret_cast<float*>(smem_raw);            // [kWarps][kBlockM][kOStride]
  float* sML = sO + kWarps * kBlockM * kOStride;              // [kWarps][kBlockM][2]
  int* sFlag = reinterpret_cast<int*>(sML + kWarps * kBlockM * 2);  // [kWarps][kBlockM]
  static_assert((kWarps * kBlockM * (kOStride + 3)) * 4 <= kT.smem_bytes(kMTiles), "combine fits");
  allow_dependent_grid();  // (the next kernel's CTAs wait for this grid's end before they read)
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int rr = 16 * (r / 2) + 8 * (r % 2) + lane / 4;  // the row within the CTA's tile
    float m, l;
    if (unified_partial) {
      // phi for a warp that saw a visible key of the row (its first key is below the row's end).
      const bool seen = n_tiles > 0 && k_begin + warp * kWarpKeys < limit[r];
      m = seen ? p.phi_log2 : -INFINITY;
      l = quad_sum(unified.l[r]);
    } else {
      m = exact.m[r];
      l = quad_sum(exact.l[r]);
    }
    const bool row_left = (__ballot_sync(0xffffffffu, flagged[r]) >> (lane & ~3) & 0xFu) != 0;  // the quad's OR
    if (t4 == 0) {
      sML[(warp * kBlockM + rr) * 2] = m;
      sML[(warp * kBlockM + rr) * 2 + 1] = l;
      sFlag[warp * kBlockM + rr] = row_left ? 1 : 0;
    }
    float* o_row = sO + (warp * kBlockM + rr) * kOStride;
#pragma unroll
    for (int n = 0; n < kDTiles; ++n) {
      *reinterpret_cast<float2*>(o_row + 8 * n + 2 * t4) =
          make_float2(tOrO[r / 2][n][2 * (r % 2)], tOrO[r / 2][n][2 * (r % 2) + 1]);
    }
  }
  __syncthreads();

  constexpr int kQuads = kHeadDim / 4;
  for (int item = static_cast<int>(threadIdx.x); item < kBlockM * kQuads; item += kThreads) {
    const int rr = item / kQuads, col = (item % kQuads) * 4;
    const int row = r0 + rr;
    if (row >= p.rows) continue;
    float M = -INFINITY;
    int flag = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      M = fmaxf(M, sML[(w * kBlockM + rr) * 2]);
      flag |= sFlag[w * kBlockM + rr];
    }
    float L = 0.0f;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float m = sML[(w * kBlockM + rr) * 2];
      const float wt = m == -INFINITY ? 0.0f : exp2f(m - M);  // exactly 1 for the unified max
      // (fused explicitly: the kernels with and without the merge must round the partials alike)
      L = __fmaf_rn(wt, sML[(w * kBlockM + rr) * 2 + 1], L);
      const float4 x = *reinterpret_cast<const float4*>(sO + (w * kBlockM + rr) * kOStride + col);
      o = make_float4(__fmaf_rn(wt, x.x, o.x), __fmaf_rn(wt, x.y, o.y), __fmaf_rn(wt, x.z, o.z),
                      __fmaf_rn(wt, x.w, o.w));
    }
    if (p.direct) {
      store_final(p, b, h_kv, row, col, M, L, o);
      if (col == 0 && flag != 0 && p.counter != nullptr) atomicAdd(p.counter, 1);
    } else {
      const std::int64_t R = static_cast<std::int64_t>(gridDim.z) * p.heads_kv * p.rows;
      const std::int64_t idx = split * R + head_row0 + row;
      *reinterpret_cast<float4*>(p.part_o + idx * kHeadDim + col) = o;
      if (col == 0) {
        *reinterpret_cast<float2*>(p.part_ml + idx * 2) = make_float2(M, L);
        p.part_flag[idx] = flag;
      }
    }
  }
  if constexpr (kMergeInLastSplit) {
    // Arrival: this CTA's partial is visible to the GPU before its ticket; the group's last split
    // merges the group.
    __threadfence();
    __syncthreads();
    bool last = false;
    if (threadIdx.x == 0) {
      last = take_ticket(group_counter, p.splits - 1) == p.splits - 1;
      if (last) __threadfence();  // (the other splits' partials are read after this)
    }
    if (!__syncthreads_or(last)) return;
    static_assert(kThreads == kMergeThreads, "merge_rows's pieces a thread");
    static_assert(kMergeScratchFloats * 4 <= kT.smem_bytes(kMTiles), "merge_rows's scratch in the stages");
    const int rows = min(kBlockM, p.rows - r0);
    merge_rows<kHeadDim>(p, b, h_kv, r0, 0, rows, reinterpret_cast<float*>(smem_raw));
  }
}

// Host side: one launch of a split-kernel instantiation (a programmatic dependent of the kernel before
// it when `dependent`). Throws pasa::Error on a CUDA error.
template <class TileOf, int kMTiles, typename InElem, bool kToHalf>
void launch_decode_split_tile(const DecodeParams& p, int batch, bool dependent, cudaStream_t stream) {
  constexpr DecodeTile kT = TileOf::value;
  constexpr int smem = kT.smem_bytes(kMTiles);
  auto* kernel = p.merge_in_last_split ? attention_decode_kernel<TileOf, kMTiles, InElem, kToHalf, true>
                                       : attention_decode_kernel<TileOf, kMTiles, InElem, kToHalf, false>;
  static OncePerDevice configured;
  configured([&] {
    set_shared_memory(attention_decode_kernel<TileOf, kMTiles, InElem, kToHalf, true>, smem, true,
                      "cudaFuncSetAttribute(attention_decode_kernel)");
    set_shared_memory(attention_decode_kernel<TileOf, kMTiles, InElem, kToHalf, false>, smem, true,
                      "cudaFuncSetAttribute(attention_decode_kernel)");
  });
  const dim3 grid(p.splits, p.heads_kv * p.row_chunks, batch);
  launch_kernel(kernel, grid, dim3(kT.threads()), smem, stream, dependent, "attention_decode_kernel launch", p);
}

// The merge as a kernel of its own (the calls captured into CUDA graphs, where it costs less GPU time
// than the merge in the last split: decode_params.h): a CTA a packed row, so that a small batch's
// few groups spread over many SMs, each calling merge_rows for its row.
template <int kHeadDim>
__global__ void __launch_bounds__(kMergeThreads) attention_decode_merge_kernel(const __grid_constant__ DecodeParams p) {
  __shared__ float4 scratch[kMergeScratchFloats / 4];
  wait_for_previous_grid();  // the split kernel's partials
  const int h_kv = static_cast<int>(blockIdx.y) % p.heads_kv;
  const int r0 = static_cast<int>(blockIdx.y) / p.heads_kv * p.chunk_rows;
  const int rows = min(p.chunk_rows, p.rows - r0), row = static_cast<int>(blockIdx.x);
  if (row >= rows) return;
  merge_rows<kHeadDim>(p, static_cast<int>(blockIdx.z), h_kv, r0, row, 1, reinterpret_cast<float*>(scratch));
}

}  // namespace pasa::cuda
