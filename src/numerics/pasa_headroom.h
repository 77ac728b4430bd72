// SPDX-License-Identifier: Apache-2.0
// PASA's headroom for its fp16 running sums (docs/algorithms.md section 3). The state keeps l and O~
// relative to a reference m; a diffuse row (many keys of similar weight) adds up to one a key to l and
// up to |V| a key to O~, so that in fp16 l overflows past 65504 keys and O~ past 65504 / |V| of them
// (4096 keys at V = 16, 2 at V = 40000). Before each key block the state update may move the reference
// up by k (base-2 units; k ln 2 in natural ones): the rescale factors of the old state and of the new
// block then carry 2^-k, which scales l and O~ down alike; the LSE (m + log l) does not move. Two rules
// set k, the larger wins:
// - l: once l reaches 2^kPasaHeadroomLog2, k = floor(log2 l) - kPasaHeadroomDrop, which brings l back
//   to [32, 64), so l stays below 2^10 + 128;
// - O~: the state keeps w, a bound on |O~|: each block adds its share of l times its largest |V|
//   (pasa_output_bound), and w scales with O~. The next block adds weights that sum to at most its
//   weight W (relative to its own maximum: its row sum of P where the update knows it, P taken against
//   the block's maximum; else its key count, block_kv) times its maximum's factor 2^below, times its
//   own largest |V|; where that bound, w + W 2^ceil(below) v_block, reaches 2^kPasaOutputLog2,
//   k = floor(log2 bound) - (kPasaOutputLog2 - 1), which brings it back to [2^14, 2^15): O~ stays below
//   half of fp16's largest value whatever finite V holds, and a block of large V far below the row's
//   maximum (far below the block's own maximum too, where W is its row sum), whose weight is small,
//   moves nothing. Below |V| = 25 the l rule alone acts.
// A new block's factor, about 2^-k in all over the row, stays a normal fp16 number up to about
// 2^14 * 48 keys. The new reference is rounded up in the state's format, so that at least k is kept
// where its step is coarser than k (a reference past 2048 in fp16), unless that moves it further than
// pasa_max_move: then it is rounded to nearest, and where that loses k (fp16's step is 32 past 32768)
// the row keeps no headroom. A block whose P is taken against its own maximum and whose P V could
// pass 2^15 (pasa_pv_shift > 0) has its P V rounded to fp16 at 2^-shift times its value, and O~'s
// factor for it takes the 2^shift back (P itself, and l, are untouched: its small weights keep their
// bits). The emulator and the pasa kernels (online_softmax.cuh) both call these.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PASA_HOST_DEVICE __host__ __device__
#else
#define PASA_HOST_DEVICE
#endif

namespace pasa {

constexpr int kPasaHeadroomLog2 = 10;
constexpr float kPasaHeadroomThreshold = 1024.0f;  // 2^kPasaHeadroomLog2
constexpr int kPasaHeadroomDrop = 5;               // l comes back to [2^5, 2^6)
static_assert(kPasaHeadroomThreshold == static_cast<float>(1 << kPasaHeadroomLog2));

constexpr int kPasaOutputLog2 = 15;        // the O~ rule's bound on |O~|: 2^15, half of fp16's range
constexpr float kPasaLargestV = 65504.0f;  // fp16's largest value: the largest |V| the rules take

// The exponent of a finite x >= 0 (normal; -127 for 0 or a subnormal; an inf reads as 128), read from
// its bits: the same on the host and the GPU, and no select. Every caller's argument is a sum of
// non-negative terms, |V| clamped to kPasaLargestV; only a row sum of P over a block whose S'
// overflowed is NaN (it reads as 128 or more, host and GPU apart), and that row is NaN either way.
PASA_HOST_DEVICE inline int pasa_exponent(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return static_cast<int>(bits >> 23) - 127;
}

// 2^e for an integer e in [-126, 127], exactly (the same on the host and the GPU).
PASA_HOST_DEVICE inline float pasa_power_of_two(int e) {
  const std::uint32_t bits = static_cast<std::uint32_t>(e + 127) << 23;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// k base-2 units in the state's units: k itself, or k ln 2 (a float product, the same on the host and
// the GPU) in natural ones.
PASA_HOST_DEVICE constexpr float pasa_units(int k, bool base2) {
  return base2 ? static_cast<float>(k) : static_cast<float>(k) * 0.6931471805599453f;
}

// A block's largest |V| as the rules below take it: at most kPasaLargestV (an inf or NaN V, past
// PASA's fp16 input, spoils its own channel, not the row). Clamped where it is found (the emulator's
// operands, the kernels' prepass), then scaled by P's scale where P carries one (the emulator's
// p_scale: O~ then carries it too).
PASA_HOST_DEVICE inline float pasa_clamped_v(float v_block) { return v_block <= kPasaLargestV ? v_block : kPasaLargestV; }

// The bound w on |O~| after a block: the old one times the factor ep of the old state, plus the block's
// share of l (l_add: what the block added to l, its factor included) times its largest |V|. In fp32,
// the same on the host and the GPU (not a rounding point of the algorithm: the rules keep a margin of
// two).
PASA_HOST_DEVICE inline float pasa_output_bound(float w, float ep, float l_add, float v_block) {
  return fmaf(ep, w, l_add * v_block);
}

// What the state update adds to its reference for a key block (both rules above): 0 where neither
// acts, else k base-2 units (pasa_units). l: the running sum (a float value); w: the bound on |O~|
// (pasa_output_bound); v_block: the block's largest |V| (pasa_clamped_v); below: the block's
// recovered maximum minus the reference it would take without a move (<= 0; 0 for the row's first
// block), in the state's units; weight: W above (a row sum of P as l takes it, or block_kv). Written
// with selects only, so that a kernel's state update around it stays one basic block.
PASA_HOST_DEVICE inline float pasa_headroom(float l, float w, float v_block, float below, float weight, bool base2) {
  const int k_l = l >= kPasaHeadroomThreshold ? pasa_exponent(l) - kPasaHeadroomDrop : 0;
  const float below_log2 = base2 ? below : below * 1.4426950408889634f;
  // 2^ceil(below_log2) where that is a normal float (ceil >= -126), else nothing; a NaN below, which
  // no caller gives, reaches nothing rather than casting NaN to int.
  const float reach =
      !(below_log2 > -127.0f) ? 0.0f : weight * pasa_power_of_two(static_cast<int>(ceilf(below_log2)));
  // (bound >= 2^kPasaOutputLog2 exactly where its exponent minus (kPasaOutputLog2 - 1) is positive)
  const int k_o = pasa_exponent(fmaf(reach, v_block, w)) - (kPasaOutputLog2 - 1);
  const int k = k_l > k_o ? k_l : k_o;  // (k_l >= 0)
  return pasa_units(k, base2);
}

// The shift of a block's P V before its rounding to fp16: s where block_kv weights of at most 1 times
// the block's largest |V| (v_block, pasa_clamped_v) reach 2^kPasaOutputLog2 (P V is then rounded at 2^-s times its
// value, below 2^15, and O~'s factor for the block takes 2^s), else 0. At most 8 for blocks of 128
// keys of |V| <= kPasaLargestV.
PASA_HOST_DEVICE inline int pasa_pv_shift(float v_block, int block_kv) {
  const int shift = pasa_exponent(static_cast<float>(block_kv) * v_block) - (kPasaOutputLog2 - 1);
  return shift > 0 ? shift : 0;
}

// The largest row sum l the headroom lets a row reach: below the threshold before a block, plus that
// block's at most block_kv weights of at most 1 each.
PASA_HOST_DEVICE constexpr float pasa_largest_row_sum(int block_kv) {
  return kPasaHeadroomThreshold + static_cast<float>(block_kv);
}

// The largest move of the reference whose rescale factor, 2^-move (e^-move in natural units), keeps
// kPasaMoveBits significant bits in the state format, whose smallest subnormal is
// 2^(min_exponent - man_bits): fp16 2^-16, fp32 2^-141. Every later P of the row carries that factor,
// so a move by more leaves them a few bits (e^-16 in natural units: one) or none (fp16's step of 32
// where |m| >= 32768 made both factors 0 and wiped l and O~).
constexpr int kPasaMoveBits = 8;
PASA_HOST_DEVICE constexpr float pasa_max_move(int man_bits, int min_exponent, bool base2) {
  return pasa_units(man_bits - min_exponent - kPasaMoveBits, base2);
}

}  // namespace pasa
