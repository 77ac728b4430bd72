// SPDX-License-Identifier: Apache-2.0
// Seeded uniform inputs written on the device: what the benchmarks (pasa bench, bench/) time on.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace pasa::cuda {

// n fp16 (or bf16) values, uniform in [-1, 1), from a hash of (index, seed): fresh for every seed,
// never all zero. Enqueued on `stream`; throws pasa::Error if the launch fails.
void fill_uniform_16bit(std::uint16_t* out, std::int64_t n, std::uint64_t seed, bool bf16, cudaStream_t stream);

}  // namespace pasa::cuda
