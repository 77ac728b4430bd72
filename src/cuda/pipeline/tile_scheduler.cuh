// SPDX-License-Identifier: Apache-2.0
// The persistent kernels' static tile scheduler: CTA c of a grid of G (one per SM) takes tiles
// c, c + G, c + 2G, ... of the (query block, batch, head) tiles. Non-causal tiles are ordered head by
// head, so that the CTAs running at one time share a head's K and V in L2; causal ones longest first
// (the query blocks that see the most keys, of every head, before shorter ones), so that the short
// tiles at the end fill the SMs that finish early.
#pragma once

namespace pasa::cuda {

struct AttentionTile {
  int m_block, b, h;
};

struct TileScheduler {
  int m_blocks;  // query blocks per (batch, head)
  int heads;     // query heads
  int batch;
  bool causal;

  __device__ __forceinline__ int count() const { return m_blocks * heads * batch; }

  __device__ __forceinline__ AttentionTile tile(int t) const {
    if (causal) {
      const int per_block = heads * batch;
      const int bh = t % per_block;
      return {m_blocks - 1 - t / per_block, bh / heads, bh % heads};
    }
    const int bh = t / m_blocks;
    return {t % m_blocks, bh / heads, bh % heads};
  }
};

}  // namespace pasa::cuda
