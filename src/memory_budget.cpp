// SPDX-License-Identifier: Apache-2.0
#include "memory_budget.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>

#include "pasa/error.h"

namespace pasa {
namespace {

constexpr std::uint64_t kUnbounded = std::numeric_limits<std::uint64_t>::max();

// A file of procfs, whole, by open and read (a C++ stream fails on procfs in some sandboxes); nullopt
// where it cannot be read.
std::optional<std::string> read_proc_file(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char chunk[4096];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ::close(fd);
      if (got < 0 || text.empty()) return std::nullopt;
      return text;
    }
    text.append(chunk, static_cast<std::size_t>(got));
  }
}

// MemAvailable from /proc/meminfo: what the kernel estimates can be allocated without swapping.
// (Read line by line: some lines, HugePages_Total among them, carry no unit.)
std::optional<std::uint64_t> system_available_bytes() {
  const std::optional<std::string> text = read_proc_file("/proc/meminfo");
  if (!text) return std::nullopt;
  std::istringstream meminfo(*text);
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

// RLIMIT_AS minus the address space already mapped.
std::optional<std::uint64_t> address_space_room_bytes() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  const std::optional<std::uint64_t> mapped = mapped_address_space_bytes();
  if (!mapped) return std::nullopt;
  const std::uint64_t used = *mapped;
  // A process already mapped past its limit (the limit lowered after a runtime such as CUDA reserved
  // its address ranges) says nothing about what one more allocation can get: no estimate.
  if (used >= limit.rlim_cur) return std::nullopt;
  return limit.rlim_cur - used;
}

// The machine's physical memory: a bound on the others, and the only one where neither can be read (a
// sandbox without MemAvailable, no address-space limit), so that a working set larger than the machine
// is still refused before it is attempted.
std::optional<std::uint64_t> physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::nullopt;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

}  // namespace

std::optional<std::uint64_t> mapped_address_space_bytes() {
  const std::optional<std::string> statm = read_proc_file("/proc/self/statm");
  if (!statm) return std::nullopt;
  char* end = nullptr;
  const unsigned long long pages = std::strtoull(statm->c_str(), &end, 10);
  const long page = sysconf(_SC_PAGESIZE);
  if (end == statm->c_str() || page <= 0) return std::nullopt;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

std::uint64_t saturating_product(std::initializer_list<std::uint64_t> factors) {
  std::uint64_t product = 1;
  for (const std::uint64_t f : factors) {
    if (f != 0 && product > kUnbounded / f) return kUnbounded;
    product *= f;
  }
  return product;
}

std::uint64_t saturating_sum(std::initializer_list<std::uint64_t> terms) {
  std::uint64_t sum = 0;
  for (const std::uint64_t t : terms) {
    if (t > kUnbounded - sum) return kUnbounded;
    sum += t;
  }
  return sum;
}

std::optional<std::uint64_t> available_memory_bytes() {
  auto system = system_available_bytes();
  if (system && *system == 0) system.reset();  // a reading of nothing at all is no reading
  std::optional<std::uint64_t> bound;
  for (const auto& reading : {system, address_space_room_bytes(), physical_memory_bytes()}) {
    if (reading) bound = bound ? std::min(*bound, *reading) : *reading;
  }
  return bound;
}

void require_memory(std::uint64_t bytes, const std::string& what) {
  // (with a margin for the allocator's own pages: a request of exactly what is left fails in it)
  constexpr std::uint64_t kAllocatorMargin = 1 << 20;
  const auto available = available_memory_bytes();
  if (!available || (bytes <= *available && *available - bytes >= kAllocatorMargin)) return;
  const auto system = system_available_bytes();
  const auto room = address_space_room_bytes();
  const auto physical = physical_memory_bytes();
  // (the margin counted in what it needs: a request refused for the margin alone would otherwise
  // read as needing less than is available)
  throw ResourceError(what + ": needs " + byte_size_text(saturating_sum({bytes, kAllocatorMargin})) +
                      " of memory, only " + byte_size_text(*available) + " is available (" +
                      byte_size_text(bytes) + " and a margin of " + byte_size_text(kAllocatorMargin) +
                      " for the allocator; free memory " +
                      (system ? byte_size_text(*system) : std::string("unknown")) + ", address space left " +
                      (room ? byte_size_text(*room) : std::string("unlimited")) + ", physical memory " +
                      (physical ? byte_size_text(*physical) : std::string("unknown")) + ")");
}

std::string byte_size_text(std::uint64_t bytes) {
  if (bytes == kUnbounded) return "more than 16 EiB";
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

}  // namespace pasa
