// SPDX-License-Identifier: Apache-2.0
// The pasa prepass's stages are the call's own. On the sm_90a path the prepass runs inside the
// attention kernel (where each key block serves enough tiles), and the kernel's producer copies a
// stage only once the spare warps have published it; two calls queued back to back take the same
// scratch from the stream-ordered pool, so a copy taken too early would read the previous call's K'.
// Each call must give the bits it gives alone, its stages' largest |V| included (the second call's V
// is large). (The values themselves are checked against the
// emulator by the pasa tests of test_cuda_attention.cpp and test_cuda_pasa_numerics.cpp, several
// of them on shapes that take the in-kernel prepass.) The shape here gives each key block 32 query
// tiles, at or above the launcher's rule at every dtype and head dim (pasa_hopper_launch.cuh). Without a GPU of compute capability
// 8.0 or newer the test is skipped.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_backend.h"
#include "pasa/attention.h"
#include "pasa/policy.h"

namespace pasa {
namespace {

struct DeviceCall {
  std::int64_t B, H, S, D;
  DType dtype;
  void *q = nullptr, *k_a = nullptr, *k_b = nullptr, *v_a = nullptr, *v_b = nullptr, *o_a = nullptr, *o_b = nullptr;

  std::size_t elements() const { return static_cast<std::size_t>(B * H * S * D); }

  // Q and two each of K and V of deterministic 16-bit patterns (finite in fp16 and bf16, mean away
  // from 0 so that the shift matters; the second V near 1000, which passes fp16's range in O~ unless
  // the kernel reads its own call's largest |V| of each block), the outputs poisoned.
  void allocate() {
    const std::size_t n = elements();
    std::vector<std::uint16_t> host(n);
    const std::uint16_t one = dtype == DType::f16 ? 0x3C00 : 0x3F80;
    const std::uint16_t thousand = dtype == DType::f16 ? 0x6400 : 0x4480;  // 1024
    int salt = 0;
    for (void** p : {&q, &k_a, &k_b, &v_a, &v_b}) {
      ++salt;
      const std::uint16_t base = p == &v_b ? thousand : one;
      for (std::size_t i = 0; i < n; ++i) {
        const int step = static_cast<int>((i * (31 + 6 * salt) + 17 * salt) % 97);
        host[i] = static_cast<std::uint16_t>(base - (dtype == DType::f16 ? 8 : 1) * step) | (step % 5 == 0 ? 0x8000 : 0);
      }
      ASSERT_EQ(cudaMalloc(p, n * 2), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(*p, host.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    }
    for (void** p : {&o_a, &o_b}) {
      ASSERT_EQ(cudaMalloc(p, n * 2), cudaSuccess);
      ASSERT_EQ(cudaMemset(*p, 0xff, n * 2), cudaSuccess);
    }
  }
  void release() {
    for (void* p : {q, k_a, k_b, v_a, v_b, o_a, o_b}) cudaFree(p);
  }

  void run(void* k, void* v, void* o) const {
    AttentionArgs args;
    args.q = bhsd_view(q, dtype, B, H, S, D, Device::cuda);
    args.k = bhsd_view(k, dtype, B, H, S, D, Device::cuda);
    args.v = bhsd_view(v, dtype, B, H, S, D, Device::cuda);
    args.o = bhsd_view(o, dtype, B, H, S, D, Device::cuda);
    args.policy = parse_policy("pasa");
    attention(args);
  }

  std::vector<std::uint16_t> bits(const void* o) const {
    std::vector<std::uint16_t> out(elements());
    EXPECT_EQ(cudaMemcpy(out.data(), o, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

TEST(CudaPasaPrepass, CallsQueuedBackToBackReadOnlyTheirOwnStages) {
  if (!cuda_backend_available()) GTEST_SKIP() << "no sm_80+ GPU: CUDA tests skipped";
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const std::int64_t D : {64, 128}) {
      SCOPED_TRACE(std::string(dtype == DType::f16 ? "f16" : "bf16") + " D " + std::to_string(D));
      DeviceCall c{1, 8, 4096, D, dtype};  // 256 tiles of 128 rows, each key block serving 32
      c.allocate();
      c.run(c.k_a, c.v_a, c.o_a);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      c.run(c.k_b, c.v_b, c.o_b);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<std::uint16_t> alone_a = c.bits(c.o_a), alone_b = c.bits(c.o_b);
      for (const auto* alone : {&alone_a, &alone_b}) {
        for (const std::uint16_t x : *alone) ASSERT_NE(x & 0x7c00, 0x7c00) << "non-finite (or unwritten) output alone";
      }
      ASSERT_NE(std::memcmp(alone_a.data(), alone_b.data(), alone_a.size() * 2), 0) << "the two keys must differ in O";
      for (int round = 0; round < 4; ++round) {
        for (void* o : {c.o_a, c.o_b}) ASSERT_EQ(cudaMemset(o, 0xff, c.elements() * 2), cudaSuccess);
        c.run(c.k_a, c.v_a, c.o_a);  // no synchronization between the calls
        c.run(c.k_b, c.v_b, c.o_b);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_EQ(c.bits(c.o_a), alone_a) << "round " << round << ": the first call";
        EXPECT_EQ(c.bits(c.o_b), alone_b) << "round " << round << ": the second call";
      }
      c.release();
    }
  }
}

}  // namespace
}  // namespace pasa
