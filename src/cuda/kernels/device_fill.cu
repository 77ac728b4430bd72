// SPDX-License-Identifier: Apache-2.0
// fill_uniform_16bit (device_fill.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/device_fill.h"

namespace pasa::cuda {
namespace {

__global__ void fill_uniform(std::uint16_t* out, std::int64_t n, std::uint64_t seed, bool bf16) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;
    if (bf16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(u);
      out[i] = *reinterpret_cast<const std::uint16_t*>(&b);
    } else {
      const __half h = __float2half_rn(u);
      out[i] = *reinterpret_cast<const std::uint16_t*>(&h);
    }
  }
}

}  // namespace

void fill_uniform_16bit(std::uint16_t* out, std::int64_t n, std::uint64_t seed, bool bf16, cudaStream_t stream) {
  fill_uniform<<<1024, 256, 0, stream>>>(out, n, seed, bf16);
  check_launch("fill_uniform");
}

}  // namespace pasa::cuda
