// SPDX-License-Identifier: Apache-2.0
// parallel_for: an OpenMP loop whose body may throw. An exception cannot cross the boundary of an
// OpenMP region (the runtime calls std::terminate), so each iteration catches what it throws, the
// first exception is kept, the remaining iterations are skipped, and it is rethrown after the region.
// Between iterations the calling thread runs its interrupt check, if it installed one (interrupt.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

#include "cpu/interrupt.h"

namespace pasa {

template <typename Body>
void parallel_for(std::int64_t count, Body&& body) {
  std::exception_ptr first;
  std::mutex first_mutex;
  std::atomic<bool> failed{false};
  InterruptPoll interrupt;
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t i = 0; i < count; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      interrupt.poll();
      body(i);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(first_mutex);
      if (!first) first = std::current_exception();
      failed.store(true, std::memory_order_relaxed);
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace pasa
