// SPDX-License-Identifier: Apache-2.0
// The wgmma building blocks of src/cuda/arch/wgmma.cuh on one warpgroup, against a CPU matrix product:
// K-major swizzled B tiles with 64- and 128-byte rows placed at several shared-memory offsets, A
// fragments from registers, the accumulator layout; INT8 and FP8 e4m3 in the shapes the sage8 kernel
// uses (with its e4m3 tile of ones), fp16 in the shapes of the pasa kernel. Its correctness rests on
// these layouts, and a wrong descriptor or swizzle shows here as a plainly wrong product. Small integer inputs keep every product exact, so the comparison is for
// equality.
#include <gtest/gtest.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/arch/ptx.cuh"
#include "cuda/arch/wgmma.cuh"
#include "cuda/arch/wgmma_16bit.cuh"
#include "cuda_backend.h"

namespace pasa::cuda {
namespace {

constexpr int kM = 64;  // one warpgroup's rows

enum class Elem { s8, e4m3, f16 };

// D[64][N] = A[64][K] B[N][K]^T with K = kRowBytes (bytes) of elements: B copied into shared memory `offset` bytes past a
// 1024-byte boundary, in the swizzled K-major layout; A's fragments read from global memory.
template <int kRowBytes, int N, Elem kElem>
__global__ void wgmma_product(const std::uint8_t* a, const std::uint8_t* b, int offset, float* d) {
  extern __shared__ std::uint8_t smem[];
  const std::uint32_t tile = ((smem_addr(smem) + 1023u) & ~1023u) + offset;
  const int tid = threadIdx.x, warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  constexpr int kParts = kRowBytes / 16;
  for (int c = tid; c < N * kParts; c += 128) {
    const int row = c / kParts, part = c % kParts;
    cp_async_16(tile + swizzled_offset<kRowBytes>(row * kRowBytes + part * 16), b + row * kRowBytes + part * 16, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async_shared();
  __syncthreads();

  const int r0 = 16 * warp + g, r1 = r0 + 8;
  std::uint32_t frag[kRowBytes / 32][4];
  for (int kk = 0; kk < kRowBytes / 32; ++kk) {
    const std::uint8_t* k0 = a + kk * 32 + 4 * t;
    frag[kk][0] = *reinterpret_cast<const std::uint32_t*>(k0 + r0 * kRowBytes);
    frag[kk][1] = *reinterpret_cast<const std::uint32_t*>(k0 + r1 * kRowBytes);
    frag[kk][2] = *reinterpret_cast<const std::uint32_t*>(k0 + 16 + r0 * kRowBytes);
    frag[kk][3] = *reinterpret_cast<const std::uint32_t*>(k0 + 16 + r1 * kRowBytes);
  }
  float out[N / 2];
  const std::uint64_t desc = kmajor_desc<kRowBytes>(tile);
  if constexpr (kElem == Elem::f16) {
    for (int i = 0; i < N / 2; ++i) out[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kRowBytes / 32; ++kk) {
      static_assert(N == 136, "the pasa kernel's K-major fp16 shape is Q K'^T, N = 136");
      wgmma_m64n136k16_rs<__half, false>(out, frag[kk], desc + 2 * kk, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(out);
  } else if constexpr (kElem == Elem::e4m3) {
    for (int i = 0; i < N / 2; ++i) out[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kRowBytes / 32; ++kk) {
      if constexpr (N == 128) {
        wgmma_e4m3_m64n128k32(out, frag[kk], desc + 2 * kk, kk > 0);
      } else {
        wgmma_e4m3_m64n64k32(out, frag[kk], desc + 2 * kk, kk > 0);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(out);
  } else {
    static_assert(N == 128, "the INT8 wrapper is m64n128k32");
    int acc[64] = {};
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kRowBytes / 32; ++kk) wgmma_s8_m64n128k32(acc, frag[kk], desc + 2 * kk, kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(acc);
    for (int i = 0; i < 64; ++i) out[i] = static_cast<float>(acc[i]);
  }
  for (int i = 0; i < N / 2; ++i) {
    const int row = (i % 4) < 2 ? r0 : r1, col = 8 * (i / 4) + 2 * t + i % 2;
    d[row * N + col] = out[i];
  }
}

// D[64][8] = A[64][128] (e4m3) times an 8-column tile of ones in the unswizzled layout of plain_desc,
// by the m64n8k32 wgmma: each row's sum in all 8 columns (the sage8 kernel's row sums of P~; the same
// 256-byte tile serves every k32 step).
__global__ void wgmma_row_sums_e4m3(const std::uint8_t* a, const std::uint8_t* ones, float* d) {
  __shared__ alignas(128) std::uint8_t tile[256];
  const int tid = threadIdx.x, warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  if (tid < 64) reinterpret_cast<std::uint32_t*>(tile)[tid] = reinterpret_cast<const std::uint32_t*>(ones)[tid];
  fence_proxy_async_shared();
  __syncthreads();
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  std::uint32_t frag[4][4];
  for (int kk = 0; kk < 4; ++kk) {
    const std::uint8_t* k0 = a + kk * 32 + 4 * t;
    frag[kk][0] = *reinterpret_cast<const std::uint32_t*>(k0 + r0 * 128);
    frag[kk][1] = *reinterpret_cast<const std::uint32_t*>(k0 + r1 * 128);
    frag[kk][2] = *reinterpret_cast<const std::uint32_t*>(k0 + 16 + r0 * 128);
    frag[kk][3] = *reinterpret_cast<const std::uint32_t*>(k0 + 16 + r1 * 128);
  }
  float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_e4m3_m64n8k32(out, frag[kk], plain_desc(smem_addr(tile)), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(out);
  for (int i = 0; i < 4; ++i) d[(i < 2 ? r0 : r1) * 8 + 2 * t + i % 2] = out[i];
}

struct Case {
  int row_bytes, n;
  Elem elem;
  int offset;
};

std::string describe(const Case& c) {
  const char* names[] = {"s8", "e4m3", "f16"};
  return std::string(names[static_cast<int>(c.elem)]) + " rows " + std::to_string(c.row_bytes) + " B, N " + std::to_string(c.n) +
         ", tile at +" + std::to_string(c.offset);
}

// One element of an operand, stored little-endian at `bytes`, and its value: INT8 in [-127, 127],
// e4m3 holding an integer in [-4, 4], or fp16 holding an integer in [-16, 16].
void random_operand(std::mt19937& rng, Elem elem, std::uint8_t* bytes, float* value) {
  if (elem == Elem::s8) {
    const int x = static_cast<int>(rng() % 255) - 127;
    *value = static_cast<float>(x);
    bytes[0] = static_cast<std::uint8_t>(static_cast<std::int8_t>(x));
  } else if (elem == Elem::e4m3) {
    const int x = static_cast<int>(rng() % 9) - 4;
    *value = static_cast<float>(x);
    bytes[0] = static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(static_cast<float>(x), __NV_SATFINITE, __NV_E4M3));
  } else {
    const int x = static_cast<int>(rng() % 33) - 16;
    *value = static_cast<float>(x);
    const std::uint16_t h = __half_as_ushort(__float2half(static_cast<float>(x)));
    bytes[0] = static_cast<std::uint8_t>(h & 0xff);
    bytes[1] = static_cast<std::uint8_t>(h >> 8);
  }
}

// The same for an MN-major B (the pasa kernel's V: B stored [K = 128 rows][N], rows of 64 fp16
// channels per 128-byte swizzled atom, atoms of 64 channels 128 rows apart, as its TMA boxes land):
// D[64][N] = A[64][128] B[128][N], fp16, through mn_major_desc and the transposed-B wgmma.
template <int N>
__global__ void wgmma_product_mn(const __half* a, const __half* b, float* d) {
  constexpr int kK = 128, kAtomBytes = kK * 128;
  extern __shared__ std::uint8_t smem[];
  const std::uint32_t tile = (smem_addr(smem) + 1023u) & ~1023u;
  const int tid = threadIdx.x, warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
  for (int c = tid; c < kK * N / 8; c += 128) {  // 16-byte chunks: row k, channels 8 j .. 8 j + 7
    const int k = c / (N / 8), n = c % (N / 8) * 8;
    cp_async_16(tile + (n / 64) * kAtomBytes + swizzled_offset<128>(k * 128 + (n % 64) * 2), b + k * N + n, true);
  }
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async_shared();
  __syncthreads();
  const int r0 = 16 * warp + g, r1 = r0 + 8;
  float out[N / 2];
  for (int i = 0; i < N / 2; ++i) out[i] = 0.0f;
  std::uint32_t frag[kK / 16][4];
  for (int kk = 0; kk < kK / 16; ++kk) {
    const __half* k0 = a + kk * 16 + 2 * t;
    frag[kk][0] = *reinterpret_cast<const std::uint32_t*>(k0 + r0 * kK);
    frag[kk][1] = *reinterpret_cast<const std::uint32_t*>(k0 + r1 * kK);
    frag[kk][2] = *reinterpret_cast<const std::uint32_t*>(k0 + 8 + r0 * kK);
    frag[kk][3] = *reinterpret_cast<const std::uint32_t*>(k0 + 8 + r1 * kK);
  }
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    const std::uint64_t desc = mn_major_desc(tile, kAtomBytes) + 128 * kk;
    if constexpr (N == 128) {
      wgmma_m64n128k16_rs<__half, true>(out, frag[kk], desc, kk > 0);
    } else {
      wgmma_m64n64k16_rs<__half, true>(out, frag[kk], desc, kk > 0);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(out);
  for (int i = 0; i < N / 2; ++i) {
    const int row = (i % 4) < 2 ? r0 : r1, col = 8 * (i / 4) + 2 * t + i % 2;
    d[row * N + col] = out[i];
  }
}

// A and B copied to the device, `launch(a, b, d)` run, D[64][n] read back (NaN-poisoned first).
template <typename Launch>
std::vector<float> product_on_device(const std::vector<std::uint8_t>& a, const std::vector<std::uint8_t>& b, int n,
                                     Launch launch) {
  std::uint8_t *da = nullptr, *db = nullptr;
  float* dd = nullptr;
  std::vector<float> d(static_cast<std::size_t>(kM) * n);
  EXPECT_EQ(cudaMalloc(&da, a.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&db, b.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dd, sizeof(float) * d.size()), cudaSuccess);
  cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
  cudaMemset(dd, 0xff, sizeof(float) * d.size());
  launch(da, db, dd);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d.data(), dd, sizeof(float) * d.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
  return d;
}

// D against the exact product sum_x A[i][x] B(x, j) (the products are small integers: exact in fp32).
template <typename BValue>
void expect_product(const std::vector<float>& d, const std::vector<float>& av, int k, int n, BValue b_value) {
  int wrong = 0;
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int x = 0; x < k; ++x) ref += static_cast<double>(av[i * k + x]) * b_value(x, j);
      if (d[i * n + j] != ref && ++wrong <= 5) ADD_FAILURE() << "D[" << i << "][" << j << "] = " << d[i * n + j] << ", expected " << ref;
    }
  EXPECT_EQ(wrong, 0);
}

template <int N>
void run_mn_major_case() {
  SCOPED_TRACE("f16 MN-major B, N " + std::to_string(N));
  constexpr int kK = 128;
  std::mt19937 rng(4321u + N);
  std::vector<std::uint8_t> a(kM * kK * 2), b(kK * N * 2);
  std::vector<float> av(kM * kK), bv(kK * N);
  for (std::size_t i = 0; i < av.size(); ++i) random_operand(rng, Elem::f16, &a[2 * i], &av[i]);
  for (std::size_t i = 0; i < bv.size(); ++i) random_operand(rng, Elem::f16, &b[2 * i], &bv[i]);
  const int smem = 1024 + (N / 64) * kK * 128;
  ASSERT_EQ(cudaFuncSetAttribute(wgmma_product_mn<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), cudaSuccess);
  const std::vector<float> d = product_on_device(a, b, N, [&](std::uint8_t* da, std::uint8_t* db, float* dd) {
    wgmma_product_mn<N><<<1, 128, smem>>>(reinterpret_cast<const __half*>(da), reinterpret_cast<const __half*>(db), dd);
  });
  expect_product(d, av, kK, N, [&](int x, int j) { return bv[x * N + j]; });
}

template <int kRowBytes, int N, Elem kElem>
void launch(const std::uint8_t* a, const std::uint8_t* b, int offset, float* d) {
  const int smem = 1024 + offset + N * kRowBytes;
  ASSERT_EQ(cudaFuncSetAttribute(wgmma_product<kRowBytes, N, kElem>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
            cudaSuccess);
  wgmma_product<kRowBytes, N, kElem><<<1, 128, smem>>>(a, b, offset, d);
}

void run_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(1234u + c.offset + c.n + c.row_bytes);
  const int size = c.elem == Elem::f16 ? 2 : 1;
  const int k = c.row_bytes / size;  // elements per row
  std::vector<std::uint8_t> a(kM * c.row_bytes), b(c.n * c.row_bytes);
  std::vector<float> av(kM * k), bv(c.n * k);
  for (std::size_t i = 0; i < av.size(); ++i) random_operand(rng, c.elem, &a[i * size], &av[i]);
  for (std::size_t i = 0; i < bv.size(); ++i) random_operand(rng, c.elem, &b[i * size], &bv[i]);

  const std::vector<float> d = product_on_device(a, b, c.n, [&](std::uint8_t* da, std::uint8_t* db, float* dd) {
    if (c.elem == Elem::s8 && c.row_bytes == 64) launch<64, 128, Elem::s8>(da, db, c.offset, dd);
    if (c.elem == Elem::s8 && c.row_bytes == 128) launch<128, 128, Elem::s8>(da, db, c.offset, dd);
    if (c.elem == Elem::e4m3 && c.n == 64) launch<128, 64, Elem::e4m3>(da, db, c.offset, dd);
    if (c.elem == Elem::e4m3 && c.n == 128) launch<128, 128, Elem::e4m3>(da, db, c.offset, dd);
    if (c.elem == Elem::f16 && c.n == 136) launch<128, 136, Elem::f16>(da, db, c.offset, dd);
  });
  expect_product(d, av, k, c.n, [&](int x, int j) { return bv[j * k + x]; });
}

TEST(WgmmaLayout, SwizzledKMajorTilesGiveTheMatrixProduct) {
  if (!cuda_hopper_path_available()) GTEST_SKIP() << "no sm_90a path: CUDA tests skipped";
  for (const int offset : {0, 1024, 4096, 8192, 12288, 20480}) {
    run_case({64, 128, Elem::s8, offset});    // sage8 Q K^T at D = 64: K tile rows of 64 bytes, 128 keys
    run_case({128, 128, Elem::s8, offset});   // sage8 Q K^T at D = 128
    run_case({128, 64, Elem::e4m3, offset});  // sage8 P~ V at D = 64: V^T tile rows of 128 keys
    run_case({128, 128, Elem::e4m3, offset}); // sage8 P~ V at D = 128
    run_case({128, 136, Elem::f16, offset});  // pasa Q K'^T: an atom of 64 channels, 128 keys + 8 mean rows
  }
}

TEST(WgmmaLayout, E4m3TimesATileOfOnesGivesTheRowSums) {
  if (!cuda_hopper_path_available()) GTEST_SKIP() << "no sm_90a path: CUDA tests skipped";
  std::mt19937 rng(2468u);
  std::vector<std::uint8_t> a(kM * 128), ones(256, 0x38);  // 0x38: e4m3 1.0
  std::vector<float> av(kM * 128);
  for (std::size_t i = 0; i < av.size(); ++i) random_operand(rng, Elem::e4m3, &a[i], &av[i]);
  const std::vector<float> d = product_on_device(a, ones, 8, [&](std::uint8_t* da, std::uint8_t* db, float* dd) {
    wgmma_row_sums_e4m3<<<1, 128>>>(da, db, dd);
  });
  expect_product(d, av, 128, 8, [](int, int) { return 1.0; });
}

TEST(WgmmaLayout, MnMajorFp16TilesGiveTheMatrixProduct) {
  if (!cuda_hopper_path_available()) GTEST_SKIP() << "no sm_90a path: CUDA tests skipped";
  run_mn_major_case<64>();   // pasa P V at D = 64: one atom of channels
  run_mn_major_case<128>();  // pasa P V at D = 128: two atoms
}

}  // namespace
}  // namespace pasa::cuda
