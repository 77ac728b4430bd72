// SPDX-License-Identifier: Apache-2.0
#include "cpu/thread_budget.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>

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

}  // namespace

int parallel_team_size() {
  // The largest team started so far: libgomp keeps its threads, whose stacks need no new room.
  static std::atomic<int> pooled{1};
  const int wanted = std::max(1, omp_get_max_threads());
  rlimit space{};
  if (getrlimit(RLIMIT_AS, &space) != 0 || space.rlim_cur == RLIM_INFINITY) return wanted;
  const std::uint64_t limit = space.rlim_cur, used = mapped_bytes();
  const std::uint64_t per_thread = thread_stack_bytes() + (std::uint64_t{64} << 10);  // (+ guard, TLS)
  const std::uint64_t fit = used >= limit ? 0 : (limit - used) / 2 / per_thread;
  const int have = pooled.load();
  const int team = static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(wanted), have + fit));
  int seen = have;
  while (team > seen && !pooled.compare_exchange_weak(seen, team)) {
  }
  return std::max(team, 1);
}

}  // namespace pasa
