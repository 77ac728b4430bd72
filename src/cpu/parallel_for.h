// SPDX-License-Identifier: Apache-2.0
// parallel_for: an OpenMP loop whose body may throw. An exception cannot cross the boundary of an
// OpenMP region (the runtime calls std::terminate), so each iteration catches what it throws, the
// first exception is kept, the remaining iterations are skipped, and it is rethrown after the region.
// The calling thread runs its interrupt check, if it installed one, between iterations and while the
// other threads finish theirs; an iteration may poll from inside (poll_interrupt, interrupt.h). In a
// child forked after a parallel region the loop runs on the calling thread alone (after_fork.h), and
// under an address-space or process limit on as many threads as can start (thread_budget.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "cpu/after_fork.h"
#include "cpu/thread_budget.h"
#include "interrupt.h"

namespace pasa {

template <typename Body>
void parallel_for(std::int64_t count, Body&& body) {
  std::exception_ptr first;
  std::mutex first_mutex;
  std::atomic<bool> failed{false};
  std::atomic<std::int64_t> finished{0};
  std::mutex finished_mutex;  // with finished_cv: the last iteration wakes the calling thread
  std::condition_variable finished_cv;
  InterruptPoll interrupt(t_loop_poll);
  auto fail = [&](std::exception_ptr e) {
    const std::lock_guard<std::mutex> lock(first_mutex);
    if (!first) first = std::move(e);
    failed.store(true, std::memory_order_relaxed);
    interrupt.stop();  // (long iterations on other threads end at their next poll)
  };
  const bool threads = !forked_after_parallel_region();
  const int team = threads ? parallel_team_size() : 1;
  note_parallel_region();
#pragma omp parallel if (threads) num_threads(team)
  {
    const ScopedLoopPoll scope(&interrupt);
#pragma omp for schedule(dynamic) nowait
    for (std::int64_t i = 0; i < count; ++i) {
      if (!failed.load(std::memory_order_relaxed)) {
        try {
          interrupt.poll();
          body(i);
        } catch (...) {
          fail(std::current_exception());
        }
      }
      if (finished.fetch_add(1, std::memory_order_acq_rel) + 1 == count) {
        const std::lock_guard<std::mutex> lock(finished_mutex);
        finished_cv.notify_all();
      }
    }
    // The calling thread, out of iterations, keeps running its check while the other threads finish
    // theirs (only it may run the check; their long iterations see the stop through poll_interrupt),
    // woken by the last iteration's end.
    if (interrupt.has_check() && interrupt.on_caller()) {
      std::unique_lock<std::mutex> lock(finished_mutex);
      while (!finished_cv.wait_for(lock, kIdlePollInterval, [&] {
        return finished.load(std::memory_order_acquire) >= count || failed.load(std::memory_order_relaxed);
      })) {
        lock.unlock();
        try {
          interrupt.poll();
        } catch (...) {
          fail(std::current_exception());
        }
        lock.lock();
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace pasa
