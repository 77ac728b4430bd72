// SPDX-License-Identifier: Apache-2.0
// The persistent kernels' static tile scheduler: CTA c of a grid of G (one per SM) takes tiles
// c, c + G, c + 2G, ... of the (query block, batch, head) tiles, ordered head by head, so that the
// CTAs running at one time share a head's K and V in L2. Within a head, causal query blocks go
// longest first (the last block sees every key), so that a CTA's later tiles are its shorter ones.
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
    const int bh = t / m_blocks, m = t % m_blocks;
    return {causal ? m_blocks - 1 - m : m, bh / heads, bh % heads};
  }
};

}  // namespace pasa::cuda
