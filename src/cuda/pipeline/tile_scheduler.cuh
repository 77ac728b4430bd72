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

// The tile counter: a 64-bit word in global memory that the grid's producers share, holding the low
// 32 bits of the launch's number (%gridid, distinct for every launch in a context) above the tickets
// drawn so far. A word that another launch left, or that was never written, is claimed for this
// launch before the first draw (so the word needs no initialization); every CTA draws until its
// ticket runs past the tiles, so a launch draws `count` tickets, and the last one clears the word
// (so a launch that finds its own number there, as a CUDA graph replay might, finds it clear). One
// launch at a time may use a word: the plan's workspace rule.
//
// claim_tile_counter makes the word this launch's, keeping the tickets drawn if it is already (one
// producer thread per CTA, before its first draw_tile).
__device__ __forceinline__ void claim_tile_counter(std::uint64_t* tickets) {
  std::uint64_t grid_id;
  asm volatile("mov.u64 %0, %%gridid;\n" : "=l"(grid_id));
  const unsigned long long tag = static_cast<unsigned long long>(grid_id) << 32;
  auto* word = reinterpret_cast<unsigned long long*>(tickets);
  unsigned long long seen = *static_cast<volatile unsigned long long*>(word);
  while ((seen & 0xffffffff00000000ull) != tag) {
    const unsigned long long now = atomicCAS(word, seen, tag);
    if (now == seen) break;
    seen = now;
  }
}

// The next tile number of this grid: G, G + 1, ... in the order the CTAs ask (`count` tiles in all).
__device__ __forceinline__ int draw_tile(std::uint64_t* tickets, int count) {
  auto* word = reinterpret_cast<unsigned long long*>(tickets);
  const int drawn = static_cast<int>(atomicAdd(word, 1ull) & 0xffffffffull);
  if (drawn == count - 1) atomicExch(word, 0ull);
  return static_cast<int>(gridDim.x) + drawn;
}

}  // namespace pasa::cuda
