// SPDX-License-Identifier: Apache-2.0
// The loop behind bench_host_overhead: the host's wall time per call, without waiting for the work.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "pasa/bench.h"
#include "pasa/error.h"

namespace pasa {

// Median over 15 rounds of (wall time of `calls` calls of `call`) / calls, in microseconds; `drain`
// (a stream synchronize, say) runs after each round, outside the timed interval.
template <typename Call, typename Drain>
double host_us_per_call(int calls, Call&& call, Drain&& drain) {
  if (calls < 1) throw Error("calls: must be at least 1");
  std::vector<double> rounds;
  for (int r = 0; r < 16; ++r) {  // round 0 warms up
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    const auto stop = std::chrono::steady_clock::now();
    drain();
    if (r > 0) rounds.push_back(std::chrono::duration<double, std::micro>(stop - start).count() / calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

// The GPU half of bench_host_overhead (src/cuda/bench/bench_host_gpu.cpp; an error without CUDA).
HostOverhead bench_host_overhead_gpu(const BenchPoint& point, int calls);

}  // namespace pasa
