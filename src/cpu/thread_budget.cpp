// SPDX-License-Identifier: Apache-2.0
#include "cpu/thread_budget.h"

#include <omp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <future>
#include <vector>

namespace pasa {
namespace {

// The stack libgomp gives a thread it creates: OMP_STACKSIZE or GOMP_STACKSIZE (a size, kilobytes
// unless it ends in B, K, M or G), else glibc's default, the stack rlimit (8 MiB where it is
// unlimited).
std::uint64_t thread_stack_bytes() {
  for (const char* name : {"OMP_STACKSIZE", "GOMP_STACKSIZE"}) {
    const char* text = std::getenv(name);
    if (text == nullptr) continue;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(text, &end, 10);
    if (end != text) {
      while (std::isspace(static_cast<unsigned char>(*end))) ++end;
      const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(*end)));
      const int shift = unit == 'B' ? 0 : unit == 'M' ? 20 : unit == 'G' ? 30 : 10;
      return static_cast<std::uint64_t>(n) << shift;
    }
  }
  rlimit stack{};
  if (getrlimit(RLIMIT_STACK, &stack) == 0 && stack.rlim_cur != RLIM_INFINITY && stack.rlim_cur > 0) {
    return stack.rlim_cur;
  }
  return std::uint64_t{8} << 20;
}

// The process's mapped address space now (/proc/self/statm's first field, in pages); 0 if unknown.
std::uint64_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t pages = 0;
  statm >> pages;
  return pages * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// How many of `wanted` more threads the process may start: the address space their stacks take
// under a finite RLIMIT_AS (at most half of what is free).
std::uint64_t threads_that_fit(std::uint64_t wanted) {
  rlimit space{};
  if (getrlimit(RLIMIT_AS, &space) != 0 || space.rlim_cur == RLIM_INFINITY) return wanted;
  const std::uint64_t limit = space.rlim_cur, used = mapped_bytes();
  const std::uint64_t per_thread = thread_stack_bytes() + (std::uint64_t{64} << 10);  // (+ guard, TLS)
  return std::min(wanted, used >= limit ? 0 : (limit - used) / 2 / per_thread);
}

// How many of `wanted` more threads can be created now, tried where RLIMIT_NPROC is finite: it
// counts every thread of the user's processes, which no file tells cheaply (ulimit -u on a shared
// machine). Threads of a small stack are started until one fails or one more than `wanted` run, then
// released and joined; one fewer than started is counted (an exiting thread leaves the count a moment
// after its join).
std::uint64_t threads_that_start(std::uint64_t wanted) {
  rlimit procs{};
  if (wanted == 0 || getrlimit(RLIMIT_NPROC, &procs) != 0 || procs.rlim_cur == RLIM_INFINITY) return wanted;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return 0;
  pthread_attr_setstacksize(&attr, std::max<std::size_t>(std::size_t{64} << 10, PTHREAD_STACK_MIN));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<pthread_t> started;
  while (started.size() < wanted + 1) {
    pthread_t thread;
    const auto wait = [](void* future) -> void* {
      static_cast<std::shared_future<void>*>(future)->wait();
      return nullptr;
    };
    if (pthread_create(&thread, &attr, wait, &released) != 0) break;
    started.push_back(thread);
  }
  pthread_attr_destroy(&attr);
  release.set_value();
  for (const pthread_t thread : started) pthread_join(thread, nullptr);
  return started.empty() ? 0 : started.size() - 1;
}

}  // namespace

int parallel_team_size() {
  // The largest team started so far: libgomp keeps its threads, which need neither room nor a
  // count again.
  static std::atomic<int> pooled{1};
  const int wanted = std::max(1, omp_get_max_threads());
  const int have = pooled.load();
  if (wanted <= have) return wanted;
  const std::uint64_t more = static_cast<std::uint64_t>(wanted - have);
  const int team = have + static_cast<int>(threads_that_start(threads_that_fit(more)));
  int seen = have;
  while (team > seen && !pooled.compare_exchange_weak(seen, team)) {
  }
  return std::max(team, 1);
}

}  // namespace pasa
