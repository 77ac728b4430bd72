// SPDX-License-Identifier: Apache-2.0
#include "cpu/after_fork.h"

#include <pthread.h>

#include <atomic>

namespace pasa {
namespace {

std::atomic<bool> g_ran_parallel_region{false};
std::atomic<bool> g_forked_after_parallel_region{false};

void in_child_after_fork() {
  if (g_ran_parallel_region.load(std::memory_order_relaxed)) {
    g_forked_after_parallel_region.store(true, std::memory_order_relaxed);
  }
}

}  // namespace

void note_parallel_region() {
  static const bool registered = pthread_atfork(nullptr, nullptr, in_child_after_fork) == 0;
  (void)registered;  // (without the handler a child hangs as it would have anyway)
  g_ran_parallel_region.store(true, std::memory_order_relaxed);
}

bool forked_after_parallel_region() { return g_forked_after_parallel_region.load(std::memory_order_relaxed); }

}  // namespace pasa
