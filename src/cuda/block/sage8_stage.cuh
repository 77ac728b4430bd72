// SPDX-License-Identifier: Apache-2.0
// The sage8 kernel's K and V tiles as its prepass writes them to global memory and the producer's bulk
// copies bring them into shared memory, byte for byte (sage8_prepare.cu writes, hopper_sage8_mainloop.cuh
// reads), and the prepass's scratch.
//
// Per (batch, K/V head, key block of s2 = 128 keys) one stage: the K8 tile (128 keys x D INT8 channels,
// rows of D bytes, K-major B of Q8 K8^T with the D-byte swizzle), then the V8^T tile (D channel rows x
// 128 e4m3 keys, rows of 128 bytes with the 128-byte swizzle, the K-major B of P~ V8, the keys of every
// 16-key chunk permuted so that the softmax's accumulator fragments are P~ V's A fragments as they
// are: sage8_prepare.cu). Both start on 1024-byte boundaries (wgmma.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/host/kernel_params.h"

namespace pasa::cuda {

template <int D>
struct SageStage {
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static constexpr int kKeys = kSage8BlockKv;  // 128
  static constexpr int kKBytes = kKeys * D;
  static constexpr int kVBytes = D * kKeys;
  static constexpr int kBytes = kKBytes + kVBytes;
};

// What the prepass leaves for the kernel, in one scratch buffer of sage8_scratch_bytes() (kernel_params.h).
struct Sage8Scratch {
  std::uint8_t* tiles;  // [B, H_kv, n_kb] stages of SageStage<D>::kBytes
  float* k_scale;       // [B, H_kv, n_kb, 8]: K8's scale per key group (key mod 8)
  float* k_mean;        // [B, H_kv, D]: smooth K's column mean
  float* v_scale;       // [B, H_kv, D]: V8's per-channel scale, max |V| / 448
  float* k_sum_part;    // [B, H_kv, n_chunk, D]: the statistics' partial sums and maxima (the prepass in
                        // passes only; sage8_prepare.cu)
  float* v_max_part;    // [B, H_kv, n_chunk, D]
  int n_kb, n_chunk;
};

// The prepass (sage8_prepare.cu) into `scratch` (sage8_scratch_bytes(r) bytes of device memory) on
// `stream`: K's mean and V's scales, K - mean to INT8 and V to FP8 as stages. Returns where it put them.
Sage8Scratch launch_sage8_prepass(const Sage8Request& r, void* scratch, void* stream);

}  // namespace pasa::cuda
