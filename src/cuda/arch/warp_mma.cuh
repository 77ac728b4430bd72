// SPDX-License-Identifier: Apache-2.0
// One warp's matrix products of the forward mainloop on mma.sync m16n8k16, operands from shared
// memory through ldmatrix, each tile in a layout of smem_rows.cuh (padded or swizzled rows: every
// 8-row ldmatrix read conflict-free). The warp owns kMTiles m16 tiles of query rows;
// each B fragment read from shared memory (K for Q K^T, V for P V) feeds all kMTiles of them.
//
// Addresses are shared-window byte addresses: each function takes the thread's own base (its
// ldmatrix row pointer at the tile's origin, from the *_lane_offset helpers) and moves it by
// compile-time rows and chunks (Rows::moved: an immediate offset, and for swizzled rows a XOR).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/arch/ptx.cuh"
#include "cuda/pipeline/smem_rows.cuh"

namespace pasa::cuda {

// A B fragment as the MMA takes it: where the tile holds bf16 (SmemElem) and the MMA runs on fp16
// (Elem), each pair rounded to fp16 as it leaves shared memory (fdpp's input format on bf16 inputs:
// no pass over the tile, no barrier for it); otherwise as loaded.
template <typename Elem, typename SmemElem>
__device__ __forceinline__ void b_fragments_as(std::uint32_t (&b)[4]) {
  if constexpr (!std::is_same_v<Elem, SmemElem>) {
    static_assert(std::is_same_v<Elem, __half> && std::is_same_v<SmemElem, __nv_bfloat16>, "bf16 -> fp16 only");
#pragma unroll
    for (int x = 0; x < 4; ++x) b[x] = bf16x2_to_half2(b[x]);
  }
}

// Byte offset of this lane's ldmatrix row for an A operand (Q: 16 rows x 16 columns, row-major;
// matrices 0..3 = rows 0-7 / 8-15 x columns 0-7 / 8-15, i.e. a0..a3).
template <class Rows>
__device__ __forceinline__ std::uint32_t a_lane_offset(int lane) {
  return Rows::chunk(lane % 8 + ((lane / 8) % 2) * 8, lane / 16);
}

// ... for the B operand of Q K^T (K row-major [key][d]: matrices = keys 0-7 x d 0-7, keys 0-7 x
// d 8-15, keys 8-15 x d 0-7, keys 8-15 x d 8-15, i.e. b0, b1 of n-tile n and of n-tile n + 1).
template <class Rows>
__device__ __forceinline__ std::uint32_t k_lane_offset(int lane) {
  return Rows::chunk((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
}

// ... for the B operand of P V (V row-major [key][d], read transposed: matrices = keys 0-7 / 8-15 x
// d 0-7, then keys 0-7 / 8-15 x d 8-15, i.e. b0, b1 of d-tile n and of d-tile n + 1).
template <class Rows>
__device__ __forceinline__ std::uint32_t v_lane_offset(int lane) {
  return Rows::chunk(((lane / 8) % 2) * 8 + lane % 8, lane / 16);
}

// This warp's Q fragments of one k16 step (head-dim columns 16 kk ..), all m-tiles.
template <int kMTiles, class QRows>
__device__ __forceinline__ void load_q_fragments(std::uint32_t (&q)[kMTiles][4], std::uint32_t q_addr,
                                                 int kk) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) ldmatrix_x4(q[mt], QRows::moved(q_addr, mt * 16, 2 * kk));
}

// acc += Q K^T for kNTiles n8 key tiles starting at k_addr's key row, over the head dim (kDChunks
// k16 steps). Q fragments come from shared memory (q_addr) each k step, or from registers when
// kQInRegs (then q_regs[kk] holds m-tile 0's fragments; kMTiles must be 1).
template <int kMTiles, int kNTiles, int kDChunks, class QRows, class KRows, typename Elem, bool kQInRegs = false,
          typename SmemElem = Elem>
__device__ __forceinline__ void warp_qk(float (&acc)[kMTiles][kNTiles][4], std::uint32_t q_addr,
                                        const std::uint32_t (&q_regs)[kQInRegs ? kDChunks : 1][4],
                                        std::uint32_t k_addr) {
  static_assert(kNTiles % 2 == 0, "ldmatrix.x4 loads two n8 tiles");
  static_assert(!kQInRegs || kMTiles == 1, "Q in registers: one m-tile per warp");
#pragma unroll
  for (int kk = 0; kk < kDChunks; ++kk) {
    std::uint32_t q[kMTiles][4];
    if constexpr (kQInRegs) {
#pragma unroll
      for (int x = 0; x < 4; ++x) q[0][x] = q_regs[kk][x];
    } else {
      load_q_fragments<kMTiles, QRows>(q, q_addr, kk);
    }
#pragma unroll
    for (int n = 0; n < kNTiles; n += 2) {
      std::uint32_t b[4];
      ldmatrix_x4(b, KRows::moved(k_addr, n * 8, 2 * kk));
      b_fragments_as<Elem, SmemElem>(b);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816<Elem>(acc[mt][n], q[mt], b[0], b[1]);
        mma_16816<Elem>(acc[mt][n + 1], q[mt], b[2], b[3]);
      }
    }
  }
}

// acc += P V for kDTiles n8 head-dim tiles starting at v_addr's column, over kNChunks k16 key steps.
// P: A fragments, p[mt][kk] for keys 16 kk .. 16 kk + 15.
template <int kMTiles, int kNChunks, int kDTiles, class VRows, typename Elem, typename SmemElem = Elem>
__device__ __forceinline__ void warp_pv(float (&acc)[kMTiles][kDTiles][4],
                                        const std::uint32_t (&p)[kMTiles][kNChunks][4],
                                        std::uint32_t v_addr) {
  static_assert(kDTiles % 2 == 0, "ldmatrix.x4 loads two n8 tiles");
#pragma unroll
  for (int kk = 0; kk < kNChunks; ++kk) {
#pragma unroll
    for (int n = 0; n < kDTiles; n += 2) {
      std::uint32_t b[4];
      ldmatrix_x4_trans(b, VRows::moved(v_addr, kk * 16, n));
      b_fragments_as<Elem, SmemElem>(b);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        mma_16816<Elem>(acc[mt][n], p[mt][kk], b[0], b[1]);
        mma_16816<Elem>(acc[mt][n + 1], p[mt][kk], b[2], b[3]);
      }
    }
  }
}

// O's fp32 accumulators (C layout: c0, c1 in row g, c2, c3 in row g + 8 of each m-tile) times a
// factor per row, row 2 mt + i of `factor` for half i of m-tile mt: the online softmax's rescale.
template <int kMTiles, int kDTiles>
__device__ __forceinline__ void scale_rows(float (&o)[kMTiles][kDTiles][4], const float (&factor)[2 * kMTiles]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int n = 0; n < kDTiles; ++n) {
      o[mt][n][0] *= factor[2 * mt];
      o[mt][n][1] *= factor[2 * mt];
      o[mt][n][2] *= factor[2 * mt + 1];
      o[mt][n][3] *= factor[2 * mt + 1];
    }
}

// The C fragments of S (two n8 tiles per k16 chunk) repacked as the A fragments of P for the PV MMA:
// the m16n8 accumulator layout of two adjacent key tiles is exactly the m16k16 operand layout.
template <typename Elem, int kMTiles, int kNTiles, int kNChunks>
__device__ __forceinline__ void scores_to_p_fragments(std::uint32_t (&p)[kMTiles][kNChunks][4],
                                                      const float (&s)[kMTiles][kNTiles][4]) {
  static_assert(kNTiles == 2 * kNChunks, "two key tiles per k16 chunk");
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int kk = 0; kk < kNChunks; ++kk) {
      p[mt][kk][0] = pack2<Elem>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      p[mt][kk][1] = pack2<Elem>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      p[mt][kk][2] = pack2<Elem>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      p[mt][kk][3] = pack2<Elem>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
  }
}

}  // namespace pasa::cuda
