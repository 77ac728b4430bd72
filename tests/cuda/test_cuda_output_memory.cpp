// SPDX-License-Identifier: Apache-2.0
// Device outputs that would lose results are refused before any launch, as on the host: an output
// overlapping q (in place) or with heads sharing rows, on the dense call, its plan's run() with new
// pointers, and the KV-cache call with the output in the cache. The device memory is unchanged after.
// Without a GPU of compute capability 8.0 or newer every test is skipped.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <vector>

#include "cuda_case_harness.h"
#include "pasa/attention_plan.h"
#include "pasa/serving.h"

namespace pasa {
namespace {

TEST(CudaOutputMemory, OverlappingDeviceOutputsAreRefusedBeforeAnyLaunch) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  const Tensor4 host = test::random_tensor(1, 2, 64, 64, rng, DType::f16);
  DeviceTensor q(host), k(host), v(host), o(host);
  const std::vector<std::uint8_t> q_before = q.download();
  AttentionArgs args;
  args.q = q.view;
  args.k = k.view;
  args.v = v.view;
  args.o = q.view;  // in place
  args.policy = exact_policy(DType::f16);
  test::expect_error([&] { attention(args); }, "o: its memory overlaps q's");
  args.o = o.view;
  args.o.stride[1] = 64;  // head 1 starts at row 1 of head 0
  test::expect_error([&] { attention(args); }, "o: sizes [1, 2, 64, 64] with strides [8192, 64, 64, 1]");
  args.o = o.view;
  const AttentionPlan plan(args);
  DeviceBuffer workspace(plan.workspace_bytes() + 1);
  AttentionArgs call = args;
  call.o.data = v.view.data;
  test::expect_error([&] { plan.run(call, workspace.ptr); }, "o: its memory overlaps v's");
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_EQ(q.download(), q_before);
}

TEST(CudaOutputMemory, AKvCacheCallRefusesAnOutputInTheCache) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  const Tensor4 cache = test::random_tensor(2, 2, 16, 64, rng, DType::f16, true);  // dense: 2 sequences
  const Tensor4 step = test::random_tensor(2, 8, 1, 64, rng, DType::f16, true);
  const Tensor4 fresh = test::random_tensor(2, 2, 1, 64, rng, DType::f16, true);
  DeviceTensor k_cache(cache), v_cache(cache), q(step), k(fresh), v(fresh);
  const std::vector<std::int32_t> lens = {3, 5};
  DeviceBuffer seqlens(lens.size() * sizeof(std::int32_t));
  cuda_ok(cudaMemcpy(seqlens.ptr, lens.data(), seqlens.bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  const std::vector<std::uint8_t> cache_before = k_cache.download();
  KVCacheArgs a;
  a.q = q.view;
  a.o = step.view;
  a.o.data = k_cache.view.data;  // the output inside the cache the append writes
  a.o.device = Device::cuda;
  a.k_cache = k_cache.view;
  a.v_cache = v_cache.view;
  a.k = k.view;
  a.v = v.view;
  a.cache_seqlens = static_cast<const std::int32_t*>(seqlens.ptr);
  test::expect_error([&] { attention_with_kvcache(a); }, "o: its memory overlaps k_cache's");
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT_EQ(k_cache.download(), cache_before);
}

}  // namespace
}  // namespace pasa
