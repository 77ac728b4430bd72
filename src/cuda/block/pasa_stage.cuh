// SPDX-License-Identifier: Apache-2.0
// The pasa mainloop's K' tiles as its prepass writes them to global memory and the producer's bulk
// copies bring them into shared memory, byte for byte (pasa_prepass.cuh writes, hopper_pasa_mainloop.cuh reads). (V
// needs no prepass tile: the kernel copies its rows by TMA, tma.h, from V itself where it is fp16 or
// from the prepass's fp16 copy where it is bf16.) The portable kernel (attention_fwd_pasa_portable.cu)
// reads the same stages by cp.async, undoing the swizzle into padded rows.
//
// Per (batch, K/V head, key block of s2 = 128 keys) one stage: the K' tile, the K-major B operand of
// S' = Q K'^T (N = keys, K = channels; wgmma.cuh), stored in ceil(D / 64) atoms of 64 channels with
// 128-byte rows and the 128-byte XOR swizzle, every atom starting on a 1024-byte boundary (at head
// dim 96, which only the portable kernel takes, the second atom's rows are half used). Each
// atom has kKRows = 136 rows: the 128 keys (past the sequence end, the padding key), then 8 rows holding the
// column mean of the block's fp16 K' (sum over its keys / 128) split as hi, lo, hi, lo, ... (fp16 hi,
// and fp16 lo = the rest times kMeanLoScale), so that the same wgmma (N = 136) also gives every
// thread its rows' sum of S' over the block, which PASA's local pseudo-average needs.
//
// After the stages, the largest |V| of each stage's keys (fp16 V; every channel), for the headroom's O~
// rule and P V's shift (numerics/pasa_headroom.h): kPasaVMaxSlots floats a stage, one a 64-channel
// atom (each written by the warp that prepares the atom; the kernels take the largest of them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/host/fwd_tiles.h"
#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

// The mean rows' lo part is scaled by 2^11 (fp16's precision) so that it stays normal.
constexpr float kMeanLoScale = 2048.0f;

// A stage's largest-|V| slots: one for each of up to 4 atoms (head dim 256).
constexpr int kPasaVMaxSlots = 4;

template <int D>
struct PasaStage {
  static_assert(D == 64 || D == 96 || D == 128 || D == 256, "head dims 64, 96, 128 and 256");
  static constexpr int kKeys = kPasaBlockKv;  // 128
  static constexpr int kAtomRowBytes = 128;   // 64 fp16 values
  static constexpr int kKRows = kKeys + 8;    // the keys, then the mean rows
  static constexpr int kKAtoms = (D + 63) / 64;
  static constexpr int kKAtomBytes = kKRows * kAtomRowBytes;
  static constexpr int kKBytes = kKAtoms * kKAtomBytes;
  static constexpr int kBytes = kKBytes;
  static_assert(kKAtomBytes % 1024 == 0, "atoms on 1024-byte boundaries");

  // The logical (unswizzled) byte offset of row `row` (a key, or a mean row >= kKeys) and channel `ch`
  // inside a stage; the stored offset is swizzled_offset<128>() of it (stages start on 1024 bytes).
  __host__ __device__ static constexpr std::uint32_t k_offset(int row, int ch) {
    return static_cast<std::uint32_t>((ch / 64) * kKAtomBytes + row * kAtomRowBytes + (ch % 64) * 2);
  }
};

// The bytes of the stages of n_kb key blocks of every (batch, K/V head) at a head dim of PasaStage's,
// with their largest-|V| slots after them.
std::size_t pasa_tile_bytes(int batch, int heads_kv, int n_kb, int head_dim);

// What one call of the sm_90a pasa kernel takes from pasa's pool (launch_pasa), in this order: the K'
// stages of n_kb key blocks, bf16 V rounded to fp16, and with the prepass inside the kernel a
// readiness word per stage and the chunk counter.
struct PasaHopperScratch {
  std::size_t tile_bytes, v_bytes, sync_bytes;
  std::size_t total() const { return tile_bytes + v_bytes + sync_bytes; }
};
PasaHopperScratch pasa_hopper_scratch(const KernelRequest& c, int n_kb, bool prepass_in_kernel);

}  // namespace pasa::cuda
