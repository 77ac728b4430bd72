// SPDX-License-Identifier: Apache-2.0
// PASA's pre-processing (Algorithm 1, step 1) of one key block, a 64-channel chunk a warp: the stage of
// pasa_stage.cuh that the pasa kernels read as their K slot, the largest |V| of the chunk's channels
// (the stage's slots), and for bf16 inputs the block's V rows rounded to fp16. The portable path runs
// it as a kernel of its own before the attention kernel (pasa_prepare.cu); the sm_90a engine runs it
// on its producer warpgroup's spare warps during the attention kernel itself
// (hopper_pasa_mainloop.cuh), where the prepass's memory traffic hides under the consumers' GEMMs
// instead of taking a kernel of its own before them, wherever each key block serves enough query tiles
// for those warps to keep ahead (attention_fwd_pasa.cu).
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
// The unit of work is a chunk: one 64-channel atom of a stage, by one warp, through shared memory of
// the warp's own (a warp of the engine's producer has 24 registers, too few to keep enough loads in
// flight itself):
//   1. the atom's keys are copied in with every copy in flight at once;
//   2. each lane owns a pair of adjacent channels (4 bytes of every 128-byte row), so the column sums
//      need no exchange between lanes and add the keys in order; it rewrites its pair of every row
//      in place, as fp16 input (bf16 inputs), then as K';
//   3. the K' rows go out 16 bytes a lane (8 lanes a row), swizzled on the way: one store a lane
//      for four rows, rather than a 4-byte store a row at a swizzled address of its own, since the
//      prepass runs on the consumers' SMs and its instructions take issue slots from them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/block/pasa_stage.cuh"
#include "cuda/host/kernel_params.h"
#include "numerics/pasa_headroom.h"

namespace pasa::cuda {

// The largest |V| of a stage's keys from its kAtoms slots (`load` reads one; each slot already as the
// headroom's rules take it, pasa_clamped_v).
template <int kAtoms, class Load>
__device__ __forceinline__ float pasa_stage_v_max(const float* slots, Load load) {
  float v = load(slots);
#pragma unroll
  for (int a = 1; a < kAtoms; ++a) v = fmaxf(v, load(slots + a));
  return v;
}

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
  float* v_max;    // [stages][kPasaVMaxSlots]: each atom's largest |V|, clamped (pasa_clamped_v; after
                   // the stages in `tiles`)
  __half* v_fp16;  // bf16 inputs: V in fp16, [B, H_kv, S_kv, D]; null: not written
  std::uint32_t* ready;    // [stages]: the stage's chunks written so far (in-kernel prepass; null: none)
  std::uint32_t* tickets;  // the next chunk to draw (in-kernel prepass)
  int section_pairs = 1;   // chunks go key block by key block across this many (batch, K/V head) pairs

  // The largest |V| of stage `stage`'s keys over its kAtoms atoms, as the headroom's rules take it
  // (pasa_clamped_v). The prepass may have written it in this kernel, from another SM: the caller
  // reads it after its wait on the K ring for the stage's tile, whose arrival the producer made only
  // after it saw the stage published (wait_pasa_stage), and the prepass fenced these writes before
  // publishing; read at the GPU's scope, past the L1 cache.
  template <int kAtoms>
  __device__ __forceinline__ float v_max_of(int stage) const {
    return pasa_stage_v_max<kAtoms>(v_max + static_cast<std::int64_t>(stage) * kPasaVMaxSlots,
                                    [](const float* at) { return load_relaxed_gpu(at); });
  }

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

// What the prepass refuses of a call of n_kb key blocks (throws pasa::Error): checked before its
// scratch is allocated.
void check_pasa_prepass(const KernelRequest& c, int n_kb);

// The prepass of `r` (after check_pasa_prepass) writing into `tiles` (the stages of pasa_stage.cuh, [B, H_kv, n_kb] of
// PasaStage<head_dim>::kBytes, then their largest-|V| slots) and for bf16 inputs V rounded to fp16 into
// `v_fp16` ([B, H_kv, S_kv, D], contiguous; null: V not written), without readiness words.
PasaPrepass pasa_prepass(const PasaRequest& r, std::uint8_t* tiles, void* v_fp16, int n_kb);

// The prepass `p` of the call `c` as a kernel of its own (pasa_prepare.cu), on `stream`.
void launch_pasa_tiles(const PasaPrepass& p, const KernelRequest& c, void* stream);

// Shared memory a warp stages one chunk's rows in: 128 rows of 64 channels, 128 bytes a row.
constexpr int kPasaChunkStagingBytes = PasaStage<64>::kKeys * 128;

// Copies rows [0, n) of `width` 16-bit channels (a multiple of 8) from `src` (rows `stride` elements
// apart) into `staging` (128 bytes a row), all of the warp's copies in flight at once (cp.async: no
// registers held while they are), and waits for them; the rows are then visible to the whole warp.
// Lane l copies the 16-byte piece l % 8 of rows l / 8, l / 8 + 4, ...
template <typename InElem>
__device__ __forceinline__ void stage_rows(std::uint8_t* staging, const InElem* src, std::int64_t stride, int n,
                                           int width, int lane) {
  const int piece = lane % 8, row = lane / 8;
  if (8 * piece < width) {
    const InElem* from = src + row * stride + 8 * piece;
    std::uint32_t to = smem_addr(staging + row * 128 + 16 * piece);
#pragma unroll 4  // (issued in fours: the prepass kernel of its own is bound by how soon its loads are in flight)
    for (int r = row; r < n; r += 4, from += 4 * stride, to += 4 * 128) cp_async_16(to, from, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();
}

// Atom `atom` (64 channels) of stage `stage` (its index in [B, H_kv, n_kb] order), by the calling
// warp (lane = the lane in it), through `staging` (kPasaChunkStagingBytes of shared memory, the
// warp's own).
template <int D, typename InElem>
__device__ __forceinline__ void prepare_pasa_chunk(const PasaPrepass& p, int stage, int atom, int lane,
                                                   std::uint8_t* staging) {
  using Stage = PasaStage<D>;
  constexpr int kKeys = Stage::kKeys;
  constexpr bool kBf16 = std::is_same_v<InElem, __nv_bfloat16>;
  const int col0 = 64 * atom;
  const int width = min(64, D - col0);  // (head dim 96: the second atom has 32 channels)
  const int kb = stage % p.n_kb, pair = stage / p.n_kb;
  const int h = pair % p.heads_kv, b = pair / p.heads_kv;
  const int k0 = kb * kKeys;
  const int n = min(kKeys, p.seq_kv - k0);
  std::uint8_t* out = p.tiles + static_cast<std::int64_t>(stage) * Stage::kBytes;
  // This lane's pair of channels in staged row r: pair_at[32 r].
  std::uint32_t* pair_at = reinterpret_cast<std::uint32_t*>(staging) + lane;
  // The lane's piece of a row in step 3: channels col0 + 8 piece .. + 7, of rows lane / 8 + 4 i.
  const int piece = lane % 8, first_row = lane / 8;
  const bool piece_used = 8 * piece < width;

  stage_rows(staging, static_cast<const InElem*>(p.k.data) + b * p.k.stride_b + h * p.k.stride_h + k0 * p.k.stride_s + col0,
             p.k.stride_s, n, width, lane);
  const bool pair_used = 2 * lane < width;
  // The column sums of the keys (bf16 rounded to fp16 first, and stored so for the K' rows).
  float2 sum = make_float2(0.0f, 0.0f);
  if (pair_used) {
    for (int r = 0; r < n; ++r) {
      std::uint32_t raw = pair_at[32 * r];
      if constexpr (kBf16) {
        raw = bf16x2_to_half2(raw);
        pair_at[32 * r] = raw;
      }
      const float2 x = __half22float2(as_half2(raw));
      sum.x += x.x;
      sum.y += x.y;
    }
  }
  // A short block's padding key: the mean of its n keys in fp16; the sums then cover s2 rows.
  const float n_pad = static_cast<float>(kKeys - n);
  const float2 pad = n < kKeys ? make_float2(round_fp16(sum.x / n), round_fp16(sum.y / n)) : make_float2(0.0f, 0.0f);
  const float2 full = make_float2(fmaf(n_pad, pad.x, sum.x), fmaf(n_pad, pad.y, sum.y));
  const float2 shift = make_float2(p.off * full.x, p.off * full.y);
  const float a = p.diag - p.off;  // a' + b': exact in fp32 unless beta is within 2^-13 of 1
  if (pair_used) {
    // The padding key in the staged rows past the end (fp16, so it reads back as itself).
    for (int r = n; r < kKeys; ++r) pair_at[32 * r] = as_u32(__floats2half2_rn(pad.x, pad.y));
  }

  // K' rows in place, and the sums of their fp16 values for the mean rows, in row order.
  float2 ksum = make_float2(0.0f, 0.0f);
  if (pair_used) {
#pragma unroll 4
    for (int r = 0; r < kKeys; ++r) {
      const float2 x = __half22float2(as_half2(pair_at[32 * r]));
      const __half2 y = __floats2half2_rn(fmaf(a, x.x, shift.x), fmaf(a, x.y, shift.y));
      const float2 y_f = __half22float2(y);
      ksum.x += y_f.x;
      ksum.y += y_f.y;
      pair_at[32 * r] = as_u32(y);
    }
  }
  __syncwarp();  // the K' rows are staged
  if (piece_used) {
#pragma unroll 4
    for (int r = first_row; r < kKeys; r += 4) {
      *reinterpret_cast<uint4*>(out + swizzled_offset<128>(Stage::k_offset(r, col0 + 8 * piece))) =
          *reinterpret_cast<const uint4*>(staging + r * 128 + piece * 16);
    }
  }
  if (pair_used) {
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
      *reinterpret_cast<__half2*>(out + swizzled_offset<128>(Stage::k_offset(kKeys + r, col0 + 2 * lane))) = r % 2 ? lo : hi;
    }
  }
  __syncwarp();  // the staged rows are read: the buffer is free
  // V's rows of the atom, through the same buffer: their largest |V| in fp16 (bf16 rounded first) for
  // the stage's slot, and for bf16 inputs where asked the rows in fp16. (4 bytes a lane a row: 16 bytes
  // a lane for four rows, as for K', made the prepass kernel of its own 5% slower on bf16 inputs,
  // bench/NOTES.md.)
  stage_rows(staging, static_cast<const InElem*>(p.v.data) + b * p.v.stride_b + h * p.v.stride_h + k0 * p.v.stride_s + col0,
             p.v.stride_s, n, width, lane);
  __half2 v_abs = __float2half2_rn(0.0f);
  if (pair_used) {
    const bool write_v = kBf16 && p.v_fp16 != nullptr;
    __half* v_out = write_v ? p.v_fp16 + (static_cast<std::int64_t>(pair) * p.seq_kv + k0) * D + col0 + 2 * lane : nullptr;
    for (int r = 0; r < n; ++r) {
      std::uint32_t raw = pair_at[32 * r];
      if constexpr (kBf16) raw = bf16x2_to_half2(raw);
      if (write_v) *reinterpret_cast<std::uint32_t*>(v_out + static_cast<std::int64_t>(r) * D) = raw;
      v_abs = __hmax2(v_abs, __habs2(as_half2(raw)));
    }
  }
  const float mine = fmaxf(__low2float(v_abs), __high2float(v_abs));
  // (non-negative floats order as their bits do; a NaN V is skipped by the max, as the emulator's
  // fmax skips it)
  const float v_max = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(mine)));
  if (lane == 0) p.v_max[static_cast<std::int64_t>(stage) * kPasaVMaxSlots + atom] = pasa_clamped_v(v_max);
  __syncwarp();
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
    const int stage = p.stage_of(chunk / PasaStage<D>::kKAtoms);
    prepare_pasa_chunk<D, InElem>(p, stage, chunk % PasaStage<D>::kKAtoms, lane, staging);
    fence_proxy_async_global();  // (the chunk's writes are for another CTA's async-proxy copies)
    __threadfence();
    __syncwarp();
    if (lane == 0) add_release_gpu(p.ready + stage, 1u);
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
