// SPDX-License-Identifier: Apache-2.0
// bench_host_overhead on the CPU emulator (the GPU half is src/cuda/bench/bench_host_gpu.cpp).
#include <cstdint>
#include <vector>

#include "host_timing.h"
#include "memory_budget.h"
#include "pasa/attention_plan.h"

namespace pasa {

HostOverhead bench_host_overhead(const BenchPoint& pt, Device device, int calls) {
  if (device == Device::cuda) return bench_host_overhead_gpu(pt, calls);
  // The tensors the call times (q, k, v, o and the LSE in fp32), asked for before they are made.
  auto count = [](std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
    return saturating_product({static_cast<std::uint64_t>(a), static_cast<std::uint64_t>(b),
                               static_cast<std::uint64_t>(c), static_cast<std::uint64_t>(d)});
  };
  const std::uint64_t q_count = count(pt.batch, pt.heads_q, pt.seq_q, pt.head_dim);
  const std::uint64_t kv_count = count(pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim);
  const std::uint64_t lse_count = count(pt.batch, pt.heads_q, pt.seq_q, 1);
  require_memory(saturating_product({saturating_sum({q_count, q_count, kv_count, kv_count, lse_count}), 4}),
                 "the overhead benchmark's tensors");
  const auto q_elems = static_cast<std::size_t>(q_count);
  const auto kv_elems = static_cast<std::size_t>(kv_count);
  std::vector<float> q(q_elems, 0.25f), k(kv_elems, 0.5f), v(kv_elems, 0.75f), o(q_elems);
  std::vector<float> lse(static_cast<std::size_t>(lse_count));
  AttentionArgs args;
  args.q = bhsd_view(q.data(), DType::f32, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim);
  args.k = bhsd_view(k.data(), DType::f32, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim);
  args.v = bhsd_view(v.data(), DType::f32, pt.batch, pt.heads_kv, pt.seq_kv, pt.head_dim);
  args.o = bhsd_view(o.data(), DType::f32, pt.batch, pt.heads_q, pt.seq_q, pt.head_dim);
  args.lse = lse_view(lse.data(), pt.batch, pt.heads_q, pt.seq_q);
  args.causal = pt.causal;
  args.policy = pt.policy;
  const AttentionPlan plan(args);
  HostOverhead h;
  h.eager_us = host_us_per_call(calls, [&] { attention(args); }, [] {});
  h.run_us = host_us_per_call(calls, [&] { plan.run(args); }, [] {});
  return h;
}

}  // namespace pasa
