// SPDX-License-Identifier: Apache-2.0
// The persistent kernels' tile scheduler. The (query block, batch, head) tiles are numbered in one
// order; CTA c of a grid of G (one per SM) takes tile c first, then draws the next number from a
// counter the grid shares (draw_tile) whenever it is free: a CTA that drew short tiles draws more
// often, so the grid finishes together (with a fixed share, tiles c, c + G, ..., the CTAs whose share
// holds the longer causal tiles finish last; bench/NOTES.md has the numbers).
// - Non-causal tiles (all of one length) go head by head, so that the CTAs running at one time
//   share a head's K and V in L2.
// - Causal tiles go longest first within sections of `section_heads` (batch, head) pairs whose K and
//   V fit in about half the L2: the long tiles start first and the short ones fill the gaps at the
//   end, and the CTAs running at one time read the K and V of a few heads only.
#pragma once

#include <cstdint>

#include "cuda/pipeline/launch_counter.cuh"

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

// The next tile number of this grid: G, G + 1, ... in the order the CTAs ask (`count` tiles in all),
// drawn from a launch counter (launch_counter.cuh; each CTA's producer thread claims it before its
// first draw).
__device__ __forceinline__ int draw_tile(std::uint64_t* tickets, int count) {
  return static_cast<int>(gridDim.x) + take_ticket(tickets, count - 1);
}

}  // namespace pasa::cuda
