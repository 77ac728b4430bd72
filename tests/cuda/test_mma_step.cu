// SPDX-License-Identifier: Apache-2.0
// The emulator's model of a matrix-engine step (src/cpu/gemm_model.h, mma_k = 16) against Hopper's
// wgmma with fp16 accumulators, bit for bit: D = C + A B for one or two k16 steps of m64n8k16, over
// operands drawn normal, in [0, 1) (P's range), with exponents spread over fp16's normal range, and
// with subnormal operands. A difference means the model no longer describes the hardware, and a
// policy with mma_k = 16 no longer describes a kernel built on it.
#include <gtest/gtest.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/gemm_model.h"
#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/arch/wgmma_f16acc.cuh"
#include "cuda_backend.h"
#include "pasa/format.h"

namespace pasa::cuda {
namespace {

constexpr int kTrials = 256;

// One CTA a trial: A [steps][64][16], B [steps][8][16] (n-major: B^T), C and D [64][8], all fp16.
// B goes to shared memory in the unswizzled K-major layout of plain_desc.
__global__ void mma_steps_fp16(const __half* A, const __half* B, const __half* C, __half* D, int steps) {
  __shared__ alignas(256) __half sb[2][8 * 16];
  const int tid = threadIdx.x;
  const __half* b = B + blockIdx.x * steps * 128;
  for (int i = tid; i < steps * 128; i += 128) {
    const int s = i / 128, n = i % 128 / 16, k = i % 16;
    sb[s][(k / 8) * 64 + n * 8 + k % 8] = b[i];
  }
  fence_proxy_async_shared();
  __syncthreads();
  const int warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  const auto pair = [](const __half* p) {
    std::uint32_t u;
    std::memcpy(&u, p, 4);
    return u;
  };
  const __half* c = C + blockIdx.x * 512;
  std::uint32_t acc[2] = {pair(c + r0 * 8 + 2 * t), pair(c + r1 * 8 + 2 * t)};
  for (int s = 0; s < steps; ++s) {
    const __half* a = A + (blockIdx.x * steps + s) * 1024;
    const std::uint32_t frag[4] = {pair(a + r0 * 16 + 2 * t), pair(a + r1 * 16 + 2 * t),
                                   pair(a + r0 * 16 + 2 * t + 8), pair(a + r1 * 16 + 2 * t + 8)};
    wgmma_fence();
    wgmma_f16acc_m64n8k16(acc, frag, plain_desc(smem_addr(sb[s])), true);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(acc);
  }
  __half* d = D + blockIdx.x * 512;
  std::memcpy(d + r0 * 8 + 2 * t, &acc[0], 4);
  std::memcpy(d + r1 * 8 + 2 * t, &acc[1], 4);
}

enum class Draw { normal, unit, wide, subnormal };

float draw(std::mt19937& rng, Draw how) {
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float sign = rng() % 2 ? -1.0f : 1.0f;
  switch (how) {
    case Draw::normal: return normal(rng);
    case Draw::unit: return unit(rng);
    case Draw::wide: return sign * std::ldexp(1.0f + unit(rng), static_cast<int>(rng() % 23) - 14);
    case Draw::subnormal:  // half the operands subnormal (2^-24 .. 2^-15), the rest near 1
      return rng() % 2 ? sign * std::ldexp(static_cast<float>(rng() % 1023 + 1), -24) : sign * (1.0f + unit(rng));
  }
  return 0.0f;
}

void check_steps(Draw how, int steps, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const auto fp16 = [](float x) { return __half2float(__float2half(x)); };
  std::vector<float> a(static_cast<std::size_t>(kTrials) * steps * 1024), b(static_cast<std::size_t>(kTrials) * steps * 128),
      c(static_cast<std::size_t>(kTrials) * 512);
  for (float& x : a) x = fp16(draw(rng, how));
  for (float& x : b) x = fp16(draw(rng, how == Draw::unit ? Draw::normal : how));
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = fp16(draw(rng, how) * std::ldexp(1.0f, static_cast<int>(i % 8) * 2 - 2));
  const auto to_half = [](const std::vector<float>& x) {
    std::vector<__half> h(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) h[i] = __float2half(x[i]);
    return h;
  };
  const std::vector<__half> ha = to_half(a), hb = to_half(b), hc = to_half(c);
  std::vector<__half> hd(hc.size());
  __half *da = nullptr, *db = nullptr, *dc = nullptr, *dd = nullptr;
  ASSERT_EQ(cudaMalloc(&da, ha.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, hb.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, hc.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dd, hd.size() * 2), cudaSuccess);
  cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, hc.data(), hc.size() * 2, cudaMemcpyHostToDevice);
  mma_steps_fp16<<<kTrials, 128>>>(da, db, dc, dd, steps);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaMemcpy(hd.data(), dd, hd.size() * 2, cudaMemcpyDeviceToHost);
  for (__half* p : {da, db, dc, dd}) cudaFree(p);

  const Rounder acc(Format::fp16());
  const int k = 16 * steps;
  int differ = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    // The model's operands: A [64][k] and B [k][8] (row-major), from the steps' tiles.
    std::vector<float> ma(64 * k), mb(k * 8);
    for (int s = 0; s < steps; ++s) {
      for (int r = 0; r < 64; ++r)
        for (int x = 0; x < 16; ++x) ma[r * k + 16 * s + x] = a[(trial * steps + s) * 1024 + r * 16 + x];
      for (int n = 0; n < 8; ++n)
        for (int x = 0; x < 16; ++x) mb[(16 * s + x) * 8 + n] = b[(trial * steps + s) * 128 + n * 16 + x];
    }
    std::vector<double> md(c.begin() + trial * 512, c.begin() + (trial + 1) * 512);
    model_gemm(ma.data(), k, mb.data(), 8, 64, k, 8, acc, 16, acc, md.data(), 8, true);
    for (int i = 0; i < 512; ++i) {
      const double got = __half2float(hd[trial * 512 + i]);
      if (got != md[i] && !(std::isnan(got) && std::isnan(md[i])) && ++differ <= 5) {
        ADD_FAILURE() << "trial " << trial << " output " << i << ": wgmma " << got << ", model " << md[i];
      }
    }
  }
  EXPECT_EQ(differ, 0) << "of " << kTrials * 512 << " outputs";
}

TEST(MmaStep, WgmmaFp16AccumulationIsTheEmulatorsStepModel) {
  if (!cuda_hopper_path_available()) GTEST_SKIP() << "no sm_90a path: CUDA tests skipped";
  for (const int steps : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << steps << " step(s)");
    {
      SCOPED_TRACE("normal operands");
      check_steps(Draw::normal, steps, 11u + steps);
    }
    {
      SCOPED_TRACE("A in [0, 1)");
      check_steps(Draw::unit, steps, 21u + steps);
    }
    {
      SCOPED_TRACE("exponents over fp16's normal range");
      check_steps(Draw::wide, steps, 31u + steps);
    }
    {
      SCOPED_TRACE("subnormal operands");
      check_steps(Draw::subnormal, steps, 41u + steps);
    }
  }
}

}  // namespace
}  // namespace pasa::cuda
