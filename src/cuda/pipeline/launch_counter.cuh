// SPDX-License-Identifier: Apache-2.0
// A counter in a workspace the caller owns, shared by the CTAs of one launch: the persistent
// kernels' tile scheduler draws tile numbers from one, the split decode counts a group's finished
// splits on one (its last split merges the group). The word needs no initialization, whatever wrote
// it before (another call's data, a graph replay, a partial write):
// - it holds the low 32 bits of the launch's number (%gridid, distinct for every launch in a
//   context) above the tickets taken so far; a word with any other number is claimed for this
//   launch (its count restarted) before the CTA's first ticket (claim_launch_counter), so no stale
//   count outlives the launch that left it;
// - the launch's last ticket clears the word, so a launch that finds its own number there (as a
//   graph replay might) finds it clear.
// One launch at a time may use a word (the plan's workspace rule).
#pragma once

#include <cstdint>

namespace pasa::cuda {

// Makes the word this launch's, keeping the tickets taken if it is already (one thread per CTA,
// before that CTA's first take_ticket; its latency is best hidden under copies in flight).
__device__ __forceinline__ void claim_launch_counter(std::uint64_t* counter) {
  std::uint64_t grid_id;
  asm volatile("mov.u64 %0, %%gridid;\n" : "=l"(grid_id));
  const unsigned long long tag = static_cast<unsigned long long>(grid_id) << 32;
  auto* word = reinterpret_cast<unsigned long long*>(counter);
  unsigned long long seen = *static_cast<volatile unsigned long long*>(word);
  while ((seen & 0xffffffff00000000ull) != tag) {
    const unsigned long long now = atomicCAS(word, seen, tag);
    if (now == seen) break;
    seen = now;
  }
}

// The next ticket of this launch, 0, 1, ... in the order the CTAs ask; the ticket `last` (the launch
// takes last + 1 in all) clears the word.
__device__ __forceinline__ int take_ticket(std::uint64_t* counter, int last) {
  auto* word = reinterpret_cast<unsigned long long*>(counter);
  const int ticket = static_cast<int>(atomicAdd(word, 1ull) & 0xffffffffull);
  if (ticket == last) atomicExch(word, 0ull);
  return ticket;
}

}  // namespace pasa::cuda
