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
#include <mutex>
#include <future>
#include <optional>
#include <vector>

#include "memory_budget.h"

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

// The address space a thread libgomp creates takes: its stack, a guard page and TLS, and the malloc
// arena glibc gives a new thread that allocates (a 64 MiB reservation, up to 8 arenas a core), unless
// MALLOC_ARENA_MAX caps the arenas.
std::uint64_t bytes_per_thread() {
  const std::uint64_t arena = std::getenv("MALLOC_ARENA_MAX") != nullptr ? 0 : std::uint64_t{64} << 20;
  return thread_stack_bytes() + (std::uint64_t{64} << 10) + arena;
}

// How many of `wanted` more threads the process may start under a finite RLIMIT_AS: those whose
// address space fits in half of what is free, less what `elsewhere` threads granted to other calling
// threads take (counted whether or not they are running yet: a team granted is not mapped until
// its parallel region starts). None where the mapped address space cannot be read.
std::uint64_t threads_that_fit(std::uint64_t wanted, std::uint64_t elsewhere) {
  rlimit space{};
  if (getrlimit(RLIMIT_AS, &space) != 0 || space.rlim_cur == RLIM_INFINITY) return wanted;
  const std::optional<std::uint64_t> used = mapped_address_space_bytes();
  if (!used) return 0;
  const std::uint64_t limit = space.rlim_cur;
  const std::uint64_t room = *used >= limit ? 0 : (limit - *used) / 2 / bytes_per_thread();
  return std::min(wanted, room > elsewhere ? room - elsewhere : 0);
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

// libgomp keeps a pool of threads for each thread that starts parallel regions, for that thread's
// life; these count them: the calling thread's own pool, and all pools' threads.
std::atomic<std::uint64_t> pooled_threads{0};
struct CallerPool {
  int team = 1;          // the largest team this thread started: its pool's threads and itself
  int budgeted_for = 1;  // the largest team asked for, which the budget cut to `team`
  ~CallerPool() { pooled_threads -= static_cast<std::uint64_t>(team - 1); }
};
thread_local CallerPool caller_pool;
std::mutex budget_mutex;  // (two callers budgeting at once would each count the other's room as free)

}  // namespace

int parallel_team_size() {
  const int wanted = std::max(1, omp_get_max_threads());
  CallerPool& pool = caller_pool;
  if (wanted <= pool.team) return wanted;  // (its pool's threads need neither room nor a count again)
  // Cut once for a team size: cut again at each call, half of what is left each time would add up
  // to all of it.
  if (wanted <= pool.budgeted_for) return pool.team;
  const std::lock_guard<std::mutex> lock(budget_mutex);
  pool.budgeted_for = wanted;
  const std::uint64_t more = static_cast<std::uint64_t>(wanted - pool.team);
  const std::uint64_t elsewhere = pooled_threads.load() - static_cast<std::uint64_t>(pool.team - 1);
  const int added = static_cast<int>(threads_that_start(threads_that_fit(more, elsewhere)));
  pool.team += added;
  pooled_threads += static_cast<std::uint64_t>(added);
  return pool.team;
}

}  // namespace pasa
