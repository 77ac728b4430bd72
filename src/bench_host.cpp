// SPDX-License-Identifier: Apache-2.0
// bench_host_overhead on the CPU emulator (the GPU half is src/cuda/bench/bench_host_gpu.cpp).
#include <vector>

#include "host_timing.h"
#include "pasa/attention_plan.h"

namespace pasa {

HostOverhead bench_host_overhead(const BenchPoint& pt, Device device, int calls) {
  if (device == Device::cuda) return bench_host_overhead_gpu(pt, calls);
  const std::size_t q_elems = static_cast<std::size_t>(pt.batch) * pt.heads_q * pt.seq_q * pt.head_dim;
  const std::size_t kv_elems = static_cast<std::size_t>(pt.batch) * pt.heads_kv * pt.seq_kv * pt.head_dim;
  std::vector<float> q(q_elems, 0.25f), k(kv_elems, 0.5f), v(kv_elems, 0.75f), o(q_elems);
  std::vector<float> lse(static_cast<std::size_t>(pt.batch) * pt.heads_q * pt.seq_q);
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
