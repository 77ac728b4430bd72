// SPDX-License-Identifier: Apache-2.0
// PASA's headroom for its fp16 running sums (docs/algorithms.md section 3). The state keeps l and O~
// relative to a reference m; a diffuse row (many keys of similar weight) adds up to one a key to l and
// |V| a key to O~, so that in fp16 l overflows past 65504 keys and O~ past 65504 / |V| (4096 keys at
// V = 16). Once l reaches 2^kPasaHeadroomLog2 the state update moves the reference up by
// k = floor(log2 l) - kPasaHeadroomDrop (base-2 units; k ln 2 in natural ones): the rescale factors of
// the old state and of the new block then carry 2^-k, which brings l back to [32, 64) and O~ with it;
// the LSE (m + log l) does not move. So l stays below 2^10 + 128 and O~ below 1152 |V| (in range for
// |V| < 56 whatever the length), and a new block's factor, about 2^-k in all over the row, stays a
// normal fp16 number up to about 2^14 * 48 keys. Below the threshold nothing changes. The new
// reference is rounded up in the state's format, so that at least k is kept where its step is
// coarser than k (a reference past 2048 in fp16), unless that moves it further than pasa_max_move:
// then it is rounded to nearest, and where that loses k (fp16's step is 32 past 32768) the row keeps
// no headroom. The emulator and the pasa kernels (online_softmax.cuh) both call these.
#pragma once

#include <climits>
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

// What the state update adds to its reference for the running sum l (a float value): 0 below the
// threshold, else k = floor(log2 l) - kPasaHeadroomDrop, in base-2 units or as k ln 2 (a float
// product, the same on the host and the GPU) in natural ones.
// Written with selects only, so that a kernel's state update around it stays one basic block. ilogb
// of an l >= 2^10 read from its exponent bits: l is then normal or inf (ilogb(inf) = INT_MAX).
PASA_HOST_DEVICE inline float pasa_headroom(float l, bool base2) {
  std::uint32_t bits;
  std::memcpy(&bits, &l, sizeof bits);
  const int biased = static_cast<int>(bits >> 23 & 0xffu);
  const int k = (biased == 0xff ? INT_MAX : biased - 127) - kPasaHeadroomDrop;
  const float h = base2 ? static_cast<float>(k) : static_cast<float>(k) * 0.6931471805599453f;
  return l >= kPasaHeadroomThreshold ? h : 0.0f;
}

// The largest row sum l the headroom lets a row reach: below the threshold before a block, plus that
// block's at most block_kv weights of at most 1 each (O~ likewise stays below it times max |V|).
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
  const int bits = man_bits - min_exponent - kPasaMoveBits;
  return base2 ? static_cast<float>(bits) : static_cast<float>(bits) * 0.6931471805599453f;
}

}  // namespace pasa
