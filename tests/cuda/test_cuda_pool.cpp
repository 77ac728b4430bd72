// SPDX-License-Identifier: Apache-2.0
// pasa's device scratch pool when the device runs out of memory: the failed allocation is a
// pasa::ResourceError, and the context is left usable — the next call runs and gives the same bits
// as before the failure. Without a GPU of compute capability 8.0 or newer the tests are skipped.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda/host/device_pool.h"
#include "cuda_backend.h"
#include "pasa/attention.h"
#include "pasa/error.h"
#include "pasa/policy.h"

namespace pasa {
namespace {

#define REQUIRE_GPU()                                                                    \
  do {                                                                                   \
    if (!cuda_backend_available()) GTEST_SKIP() << "no sm_80+ GPU: CUDA tests skipped"; \
  } while (0)

// One PASA call on the device (its K' prepass takes scratch from the pool), returning O's bits.
std::vector<std::uint16_t> pasa_call_bits() {
  constexpr std::int64_t B = 1, H = 2, S = 256, D = 128;
  const std::size_t n = B * H * S * D;
  std::vector<std::uint16_t> host(n);
  // A fixed pattern of fp16 values in [-1, 1): deterministic, never zero.
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::uint16_t>(0x3000 + (i * 37) % 0x0c00) | ((i % 3 == 0) ? 0x8000 : 0);
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  for (void** p : {&q, &k, &v, &o}) EXPECT_EQ(cudaMalloc(p, n * 2), cudaSuccess);
  for (void* p : {q, k, v}) cudaMemcpy(p, host.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemset(o, 0xff, n * 2);  // poisoned: NaN
  AttentionArgs args;
  args.q = bhsd_view(q, DType::f16, B, H, S, D, Device::cuda);
  args.k = bhsd_view(k, DType::f16, B, H, S, D, Device::cuda);
  args.v = bhsd_view(v, DType::f16, B, H, S, D, Device::cuda);
  args.o = bhsd_view(o, DType::f16, B, H, S, D, Device::cuda);
  args.policy = parse_policy("pasa");
  attention(args);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::uint16_t> out(n);
  cudaMemcpy(out.data(), o, n * 2, cudaMemcpyDeviceToHost);
  for (void* p : {q, k, v, o}) cudaFree(p);
  return out;
}

TEST(CudaPool, FailedAllocationIsAnErrorAndTheNextCallWorks) {
  REQUIRE_GPU();
  const std::vector<std::uint16_t> before = pasa_call_bits();
  for (const std::uint16_t bits : before) ASSERT_NE(bits & 0x7c00, 0x7c00) << "non-finite output before the test";

  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  // Four times the device's memory cannot be had, however much the pool holds.
  EXPECT_THROW(cuda::StreamBuffer(4 * total_bytes, device, nullptr), ResourceError);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failure must not linger as the last error";

  const std::vector<std::uint16_t> after = pasa_call_bits();
  EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * 2), 0)
      << "the call after the failed allocation differs from the one before it";
}

}  // namespace
}  // namespace pasa
