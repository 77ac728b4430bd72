// SPDX-License-Identifier: Apache-2.0
// PASA's pre-processing (Algorithm 1, step 1) of one key block, a 64-channel chunk a warp: the stage of
// pasa_stage.cuh that the pasa kernels read as their K slot, and for bf16 inputs the block's V rows
// rounded to fp16. The portable path runs it as a kernel of its own before the attention kernel
// (pasa_prepare.cu); the sm_90a engine runs it on its producer warpgroup's spare warps during the
// attention kernel itself (hopper_pasa_mainloop.cuh), where the prepass's memory traffic hides under
// the consumers' GEMMs instead of taking a kernel of its own before them, wherever each key block
// serves enough query tiles for those warps to keep ahead (attention_fwd_pasa.cu).
//
// K'_j = M K_j with M = (I - beta/s2 J) alpha stored in fp16 (diagonal a', off-diagonal -b'): row r
// is (a' + b') k_r - b' colsum, one column sum per block in fp32 (the keys in order, as the emulator
// adds them, cpu/operands.cpp), then one fused multiply-add per element rounded once to fp16. A short
// last block of n keys is padded with s2 - n copies of its own mean key (rounded to fp16), as the
// emulator does, so that every block shares M and its invariance G (numerics/pasa_shift.h). bf16
// inputs are rounded to fp16 first (the pasa policy's input format). The 8 rows after the keys hold
// the column mean of the block's fp16 K' rows (or, for pseudo_avg=k, M's row sum times the mean key)
// as hi and lo parts, which give the kernels their rows' sums of S'.
//
// The unit of work is a chunk: one 64-channel atom of a stage, by one warp. The warp first copies the
// atom's keys into shared memory of its own with every copy in flight at once (a warp of the
// engine's producer has 24 registers, too few to keep enough loads in flight itself), then each lane
// owns a pair of adjacent channels (the warp covers one 128-byte row of the atom at a time), so the
// column sums need no exchange between lanes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/block/pasa_stage.cuh"
#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

// The prepass of one call: its inputs, M's entries, where the stages (and bf16 V in fp16) go, and
// for the in-kernel prepass the readiness word of each stage and the counter the warps draw chunks
// from (both zeroed before the kernel).
struct PasaPrepass {
  Operand k, v;
  int heads_kv, seq_kv, n_kb, stages;  // stages = batch x heads_kv x n_kb, in that order
  float diag, off;
  float mean_key_factor;  // pseudo_avg=k: the mean rows are this (M's row sum) times the mean key;
                          // 0: they are the mean of the stored K' rows (pseudo_avg=s)
  std::uint8_t* tiles;
  __half* v_fp16;  // bf16 inputs: V in fp16, [B, H_kv, S_kv, D]; null: not written
  std::uint32_t* ready;    // [stages]: the stage's chunks written so far (in-kernel prepass; null: none)
  std::uint32_t* tickets;  // the next chunk to draw (in-kernel prepass)
  int section_pairs = 1;   // chunks go key block by key block across this many (batch, K/V head) pairs

  // The stage of chunk number `c / kKAtoms` in the order the chunks are drawn: sections of
  // section_pairs pairs, each key block by key block (the first block of every pair of the section,
  // then the second, ...), since the tiles that run at one time are those of a few heads, each
  // visiting its key blocks in order.
  __device__ int stage_of(int c) const {
    const int pairs = stages / n_kb, per_section = section_pairs * n_kb;
    const int section = c / per_section, rem = c % per_section;
    const int width = min(section_pairs, pairs - section * section_pairs);  // the last may be narrower
    return (section * section_pairs + rem % width) * n_kb + rem / width;
  }
};

// The prepass of `r` writing into `tiles` and `v_fp16` (null: V not written), without readiness words.
PasaPrepass pasa_prepass(const PasaRequest& r, std::uint8_t* tiles, void* v_fp16, int n_kb);

// Shared memory a warp stages one chunk's rows in: 128 rows of 64 channels, 128 bytes a row.
constexpr int kPasaChunkStagingBytes = PasaStage<64>::kKeys * 128;

// Two 16-bit inputs as fp16 values in floats.
template <typename InElem>
__device__ __forceinline__ float2 load2_as_fp16(const InElem* src) {
  const std::uint32_t raw = *reinterpret_cast<const std::uint32_t*>(src);
  if constexpr (std::is_same_v<InElem, __half>) return __half22float2(as_half2(raw));
  return __half22float2(as_half2(bf16x2_to_half2(raw)));
}

// Copies rows [0, n) of `width` 16-bit channels (a multiple of 8) from `src` (rows `stride` elements
// apart) into `staging` (128 bytes a row), all of the warp's copies in flight at once (cp.async: no
// registers held while they are), and waits for them; the rows are then visible to the whole warp.
template <typename InElem>
__device__ __forceinline__ void stage_rows(std::uint8_t* staging, const InElem* src, std::int64_t stride, int n,
                                           int width, int lane) {
  const int pieces = width / 8;  // 16-byte pieces a row
  for (int i = lane; i < n * 8; i += 32) {
    const int r = i / 8, c = i % 8;
    if (c < pieces) cp_async_16(smem_addr(staging + r * 128 + c * 16), src + r * stride + c * 8, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();
}

// One 64-channel atom of stage stage_of(chunk / kKAtoms) (a stage's index is in [B, H_kv, n_kb]
// order), atom `chunk % kKAtoms`, by the calling warp (lane = the lane in it), through `staging`
// (kPasaChunkStagingBytes of shared memory, the warp's own).
template <int D, typename InElem>
__device__ __forceinline__ void prepare_pasa_chunk(const PasaPrepass& p, int chunk, int lane, std::uint8_t* staging) {
  using Stage = PasaStage<D>;
  constexpr int kKeys = Stage::kKeys;
  const int stage = p.stage_of(chunk / Stage::kKAtoms), col0 = 64 * (chunk % Stage::kKAtoms), col = col0 + 2 * lane;
  const int width = min(64, D - col0);  // (head dim 96: the second atom has 32 channels)
  const bool mine = col < D;
  const int kb = stage % p.n_kb, pair = stage / p.n_kb;
  const int h = pair % p.heads_kv, b = pair / p.heads_kv;
  const int k0 = kb * kKeys;
  const int n = min(kKeys, p.seq_kv - k0);
  const auto* staged = reinterpret_cast<const InElem*>(staging) + 2 * lane;  // this lane's pair, row 0
  constexpr int kRow = 64;  // elements a staged row

  stage_rows(staging, static_cast<const InElem*>(p.k.data) + b * p.k.stride_b + h * p.k.stride_h + k0 * p.k.stride_s + col0,
             p.k.stride_s, n, width, lane);
  if (mine) {
    // The column sums of the keys.
    float2 sum = make_float2(0.0f, 0.0f);
    for (int r = 0; r < n; ++r) {
      const float2 x = load2_as_fp16(staged + r * kRow);
      sum.x += x.x;
      sum.y += x.y;
    }
    // A short block's padding key: the mean of its n keys in fp16; the sums then cover s2 rows.
    const float n_pad = static_cast<float>(kKeys - n);
    const float2 pad = n < kKeys ? make_float2(round_fp16(sum.x / n), round_fp16(sum.y / n)) : make_float2(0.0f, 0.0f);
    const float2 full = make_float2(fmaf(n_pad, pad.x, sum.x), fmaf(n_pad, pad.y, sum.y));
    const float2 shift = make_float2(p.off * full.x, p.off * full.y);
    const float a = p.diag - p.off;  // a' + b': exact in fp32 unless beta is within 2^-13 of 1

    // K' rows (the padding key's past the end), and the sums of their fp16 values for the mean rows.
    std::uint8_t* out = p.tiles + static_cast<std::int64_t>(stage) * Stage::kBytes;
    float2 ksum = make_float2(0.0f, 0.0f);
    for (int r = 0; r < kKeys; ++r) {
      const float2 x = r < n ? load2_as_fp16(staged + r * kRow) : pad;
      const __half2 y = __floats2half2_rn(fmaf(a, x.x, shift.x), fmaf(a, x.y, shift.y));
      const float2 y_f = __half22float2(y);
      ksum.x += y_f.x;
      ksum.y += y_f.y;
      *reinterpret_cast<__half2*>(out + swizzled_offset<128>(Stage::k_offset(r, col))) = y;
    }
    // hi = fl(mean), lo = fl((mean - hi) 2^11): the rest scaled up to hi's magnitude, so that it
    // stays a normal fp16 number (with its 11 bits) wherever hi is one. The kernels form
    // Q.hi + Q.lo 2^-11 = (the row's sum of S') / 128.
    const float2 mean = p.mean_key_factor != 0.0f
                            ? make_float2(p.mean_key_factor * (full.x / kKeys), p.mean_key_factor * (full.y / kKeys))
                            : make_float2(ksum.x / kKeys, ksum.y / kKeys);
    const __half2 hi = __floats2half2_rn(mean.x, mean.y);
    const float2 hi_f = __half22float2(hi);
    const __half2 lo = __floats2half2_rn((mean.x - hi_f.x) * kMeanLoScale, (mean.y - hi_f.y) * kMeanLoScale);
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      *reinterpret_cast<__half2*>(out + swizzled_offset<128>(Stage::k_offset(kKeys + r, col))) = r % 2 ? lo : hi;
    }
  }
  __syncwarp();  // the staged keys are read: the buffer is free
  if constexpr (std::is_same_v<InElem, __nv_bfloat16>) {
    if (p.v_fp16 != nullptr) {  // bf16 V's rows of the atom rounded to fp16, through the same buffer
      stage_rows(staging, static_cast<const InElem*>(p.v.data) + b * p.v.stride_b + h * p.v.stride_h + k0 * p.v.stride_s + col0,
                 p.v.stride_s, n, width, lane);
      if (mine) {
        __half* v_out = p.v_fp16 + (static_cast<std::int64_t>(pair) * p.seq_kv + k0) * D + col;
        for (int r = 0; r < n; ++r) {
          *reinterpret_cast<std::uint32_t*>(v_out + r * D) = bf16x2_to_half2(*reinterpret_cast<const std::uint32_t*>(staged + r * kRow));
        }
      }
      __syncwarp();
    }
  }
}

// In-kernel prepass: the calling warp draws chunks until none is left, writing each and then
// publishing it (a stage is ready once its kKAtoms chunks are) to the producers that copy it by the
// async proxy (wait_pasa_stage), in the order of stage_of.
template <int D, typename InElem>
__device__ __forceinline__ void run_pasa_prepass(const PasaPrepass& p, int lane, std::uint8_t* staging) {
  const int chunks = p.stages * PasaStage<D>::kKAtoms;
  for (;;) {
    const int chunk = __shfl_sync(0xffffffffu, lane == 0 ? static_cast<int>(atomicAdd(p.tickets, 1u)) : 0, 0);
    if (chunk >= chunks) return;
    prepare_pasa_chunk<D, InElem>(p, chunk, lane, staging);
    fence_proxy_async_global();  // (the chunk's writes are for another CTA's async-proxy copies)
    __threadfence();
    __syncwarp();
    if (lane == 0) add_release_gpu(p.ready + p.stage_of(chunk / PasaStage<D>::kKAtoms), 1u);
  }
}

// Blocks the calling thread until stage `stage` is written (its kKAtoms chunks published), then orders
// the async proxy's reads of it (a bulk copy or TMA issued next) after the writes that published it.
template <int D>
__device__ __forceinline__ void wait_pasa_stage(const PasaPrepass& p, int stage) {
  while (load_acquire_gpu(p.ready + stage) != static_cast<std::uint32_t>(PasaStage<D>::kKAtoms)) {
  }
  fence_proxy_async_global();
}

}  // namespace pasa::cuda
