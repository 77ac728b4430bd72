// SPDX-License-Identifier: Apache-2.0
// The persistent kernels' static tile scheduler: CTA c of a grid of G (one per SM) takes tiles
// c, c + G, c + 2G, ... of the (query block, batch, head) tiles.
// - Non-causal tiles (all of one length) go head by head, so that the CTAs running at one time
//   share a head's K and V in L2.
// - Causal tiles go longest first within sections of `section_heads` (batch, head) pairs whose K and
//   V fit in about half the L2: every round of G tiles then holds tiles of about one length (each CTA
//   gets a fair share of long and short ones, whatever the number of query blocks), and reads the K
//   and V of a few heads only. (Longest first within each head instead gives CTA c query block
//   c mod m_blocks every time when m_blocks divides G: S = 1k and 4k at 132 SMs measured 0.57x.)
#pragma once

namespace pasa::cuda {

struct AttentionTile {
  int m_block, b, h;
};

struct TileScheduler {
  int m_blocks;       // query blocks per (batch, head)
  int heads;          // query heads
  int batch;
  bool causal;
  int section_heads;  // causal: (batch, head) pairs per section (>= 1)

  __device__ __forceinline__ int count() const { return m_blocks * heads * batch; }

  __device__ __forceinline__ AttentionTile tile(int t) const {
    int bh, m;
    if (causal) {
      const int per_section = section_heads * m_blocks;
      const int section = t / per_section, r = t % per_section;
      const int first = section * section_heads;
      const int width = min(section_heads, heads * batch - first);  // the last section may be narrower
      m = m_blocks - 1 - r / width;
      bh = first + r % width;
    } else {
      bh = t / m_blocks;
      m = t % m_blocks;
    }
    return {m, bh / heads, bh % heads};
  }
};

}  // namespace pasa::cuda
