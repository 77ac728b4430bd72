// SPDX-License-Identifier: Apache-2.0
// A count of the CTAs of one launch that have arrived at a point, in a workspace the caller owns, so
// that the last to arrive can act for all of them (the split decode: the last split of a group merges
// the group). The arrival is one atomic add in the common case: the word holds a fixed tag above the
// count, and the last arrival leaves (tag, 0) behind for the next launch, graph replays included. A
// word without the tag (never written, or another call's data: the workspace needs no
// initialization) is converted to (tag, 1) by the CTA whose add is the latest on it, which takes the
// ticket 0; every other CTA that added onto it arrives again. (The tag is a signalling-NaN bit
// pattern with a payload, which no arithmetic writes.) One launch at a time may use a word: the
// plan's workspace rule.
#pragma once

#include <cstdint>

namespace pasa::cuda {

// This CTA's arrival (one thread): 0 for the first to arrive, ..., `last` for the last, which
// leaves the word ready for the next launch. Nothing may read or write the word between that reset
// and the launch's end but this launch's own arrivals (all `last` + 1 of them are counted before it).
__device__ __forceinline__ int arrive(std::uint64_t* counter, int last) {
  constexpr unsigned long long kTag = 0x7fbadec0ull << 32, kTagMask = 0xffffffffull << 32;
  auto* word = reinterpret_cast<unsigned long long*>(counter);
  unsigned long long old = atomicAdd(word, 1ull);
  unsigned long long left = old + 1;  // the word as this CTA's add left it
  while ((old & kTagMask) != kTag) {
    // A foreign word, this CTA's add somewhere in it: convert it if nothing changed it since.
    const unsigned long long now = atomicCAS(word, left, kTag | 1);
    if (now == left) {
      old = kTag;  // ticket 0
    } else if ((now & kTagMask) == kTag) {
      old = atomicAdd(word, 1ull);  // converted by another CTA: arrive on it
    } else {
      left = now;  // still foreign (another CTA added onto it): convert what is there now
    }
  }
  const int ticket = static_cast<int>(old & 0xffffffffull);
  if (ticket == last) atomicExch(word, kTag);
  return ticket;
}

}  // namespace pasa::cuda
