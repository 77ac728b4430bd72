// SPDX-License-Identifier: Apache-2.0
// Running out of resources inside the CPU backends: an exception thrown in an OpenMP loop reaches
// the caller (instead of std::terminate), the caller's interrupt check stops the loops, and a problem
// too large for the machine's memory is refused up front with a ResourceError saying what it needs.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <cmath>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>
#include <thread>

#include "cpu/operands.h"
#include "cpu/parallel_for.h"
#include "interrupt.h"
#include "memory_budget.h"
#include "pasa/attention.h"
#include "pasa/attention_plan.h"
#include "pasa/error.h"
#include "test_util.h"

namespace pasa {
namespace {

TEST(ParallelFor, RunsEveryIterationOnce) {
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(1000, [&](std::int64_t i) { hits[i].fetch_add(1); });
  for (const auto& h : hits) EXPECT_EQ(h.load(), 1);
}

// libgomp's thread pool does not survive fork(): a child forked after a parallel region ran hung in its
// next one. It now runs its loops on one thread (after_fork.h); the parent waits for it at most 20 s.
TEST(ParallelFor, AChildForkedAfterAParallelRegionFinishesItsLoops) {
  std::atomic<int> hits{0};
  parallel_for(1000, [&](std::int64_t) { hits.fetch_add(1); });  // (the pool exists now)
  ASSERT_EQ(hits.load(), 1000);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> child_hits{0};
    parallel_for(1000, [&](std::int64_t) { child_hits.fetch_add(1); });
    _exit(child_hits.load() == 1000 ? 0 : 1);
  }
  int status = 0;
  pid_t done = 0;
  for (int tries = 0; tries < 2000 && done == 0; ++tries) {
    done = waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the forked child's parallel_for did not finish in 20 s";
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // The parent keeps its threads.
  EXPECT_FALSE(forked_after_parallel_region());
}

TEST(ParallelFor, AnExceptionInAnIterationReachesTheCaller) {
  omp_set_num_threads(4);
  EXPECT_THROW(parallel_for(1000, [](std::int64_t i) {
                 if (i % 7 == 3) throw std::bad_alloc();
               }),
               std::bad_alloc);
  test::expect_error([] { parallel_for(100, [](std::int64_t i) { if (i == 42) throw Error("iteration 42"); }); },
                     "iteration 42");
}

// The calling thread's interrupt check (the Python binding's Ctrl-C) stops a loop between iterations;
// other threads never run it, and without one the loop runs to the end.
bool g_stop_requested = false;
int g_checks = 0;
bool stop_requested() {
  ++g_checks;
  return g_stop_requested;
}

TEST(ParallelFor, TheCallersInterruptCheckStopsTheLoop) {
  omp_set_num_threads(4);
  std::atomic<int> ran{0};
  auto slow = [&](std::int64_t) {
    ++ran;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  {
    const ScopedInterruptCheck check(&stop_requested);
    g_stop_requested = false;
    g_checks = 0;
    parallel_for(100, slow);  // about 50 ms on 4 threads: the check runs, says go on
    EXPECT_EQ(ran.load(), 100);
    EXPECT_GE(g_checks, 1);
    ran = 0;
    g_stop_requested = true;
    EXPECT_THROW(parallel_for(100000, slow), Interrupted);  // 50 s if it ran to the end
    EXPECT_LT(ran.load(), 1000);
  }
  ran = 0;
  g_checks = 0;
  parallel_for(100, slow);  // the check is gone with its scope
  EXPECT_EQ(ran.load(), 100);
  EXPECT_EQ(g_checks, 0);
}

// A long iteration on another thread (a decode row of millions of keys is one) polls from inside:
// the calling thread, out of iterations, keeps running its check and the stop reaches that iteration.
std::atomic<bool> g_stop_later{false};
bool stop_later() { return g_stop_later.load(); }

TEST(ParallelFor, ALongIterationOnAnotherThreadSeesTheCallersStop) {
  using Clock = std::chrono::steady_clock;
  omp_set_num_threads(4);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> long_iterations{0};
  auto body = [&](std::int64_t) {
    if (std::this_thread::get_id() == caller) {  // short ones: the caller runs out of iterations
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return;
    }
    ++long_iterations;
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < end) {
      poll_interrupt();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  const ScopedInterruptCheck check(&stop_later);
  g_stop_later = false;
  std::thread stopper([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    g_stop_later = true;
  });
  const auto t0 = Clock::now();
  EXPECT_THROW(parallel_for(64, body), Interrupted);
  const auto waited = Clock::now() - t0;
  stopper.join();
  EXPECT_GE(long_iterations.load(), 1);
  EXPECT_LT(waited, std::chrono::seconds(5)) << "the long iterations ran on after the stop";
  poll_interrupt();  // outside any loop: nothing
}

TEST(MemoryBudget, SaturatingArithmetic) {
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  EXPECT_EQ(saturating_product({3, 5, 7}), 105u);
  EXPECT_EQ(saturating_product({1ull << 40, 1ull << 30}), kMax);
  EXPECT_EQ(saturating_product({0, kMax, kMax}), 0u);
  EXPECT_EQ(saturating_sum({kMax - 1, 2}), kMax);
  EXPECT_EQ(byte_size_text(512), "512 B");
  EXPECT_EQ(byte_size_text(3ull << 29), "1.50 GiB");
}

TEST(MemoryBudget, ARequestBeyondTheMachineIsAResourceError) {
  if (!available_memory_bytes()) GTEST_SKIP() << "no /proc: available memory unknown";
  require_memory(1024, "a small request");
  try {
    require_memory(std::numeric_limits<std::uint64_t>::max(), "a huge request");
    ADD_FAILURE() << "no ResourceError";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("a huge request: needs more than 16 EiB of memory, only "),
              std::string::npos) << e.what();
  }
}

// A request that fits but for the allocator's margin: what it needs counts the margin, so the text
// never says it needs less than is available. In a child under ulimit -v, where what is available
// holds still (the room under the limit).
TEST(MemoryBudget, WhatARefusedRequestNeedsCountsTheAllocatorsMargin) {
  const std::optional<std::uint64_t> mapped = mapped_address_space_bytes();
  if (!mapped) GTEST_SKIP() << "no /proc/self/statm";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit limit{*mapped + (std::uint64_t{256} << 20), *mapped + (std::uint64_t{256} << 20)};
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    const std::uint64_t available = *available_memory_bytes();
    try {
      require_memory(available - (std::uint64_t{1} << 19), "a close request");
      _exit(1);
    } catch (const ResourceError& e) {
      const std::string text = e.what();
      _exit(text.find(" and a margin of 1.00 MiB for the allocator") != std::string::npos &&
                    text.find("needs " + byte_size_text(available + (std::uint64_t{1} << 19))) != std::string::npos
                ? 0
                : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: not refused; 2: the text; 3: setrlimit";
}

// What the budget reads never exceeds the machine's physical memory (its bound where nothing else can
// be read).
TEST(MemoryBudget, TheEstimateIsAtMostPhysicalMemory) {
  const auto available = available_memory_bytes();
  if (!available) GTEST_SKIP() << "no /proc and no physical memory size: available memory unknown";
  const std::uint64_t physical =
      static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_GT(*available, 0u);
  EXPECT_LE(*available, physical);
}

// The mapped address space (what the thread and memory budgets subtract from ulimit -v) is read where
// procfs is, and grows by a mapping made meanwhile (64 MiB of address space, never touched).
TEST(MemoryBudget, TheMappedAddressSpaceIsReadAndFollowsMappings) {
  if (access("/proc/self/statm", R_OK) != 0) GTEST_SKIP() << "no /proc/self/statm";
  const std::optional<std::uint64_t> before = mapped_address_space_bytes();
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(*before, 0u);
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  void* region = mmap(nullptr, kBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  const std::optional<std::uint64_t> after = mapped_address_space_bytes();
  munmap(region, kBytes);
  ASSERT_TRUE(after.has_value());
  EXPECT_GE(*after, *before + kBytes - (std::uint64_t{1} << 20));
}

// Keys broadcast (stride 0) to a sequence far beyond memory: refused before the emulator allocates.
TEST(MemoryBudget, TheEmulatorRefusesAProblemBeyondMemory) {
  if (!available_memory_bytes()) GTEST_SKIP() << "no /proc: available memory unknown";
  std::mt19937_64 rng(test::fresh_seed());
  test::Tensor4 q = test::random_tensor(1, 1, 4, 16, rng), kv = test::random_tensor(1, 1, 1, 16, rng);
  test::Tensor4 o = test::make_tensor(1, 1, 4, 16, DType::f32);
  AttentionArgs args{q.view, kv.view, kv.view, o.view};
  constexpr std::int64_t kKeys = std::int64_t{1} << 40;
  args.k.shape[2] = args.v.shape[2] = kKeys;
  args.k.stride[2] = args.v.stride[2] = 0;  // every key is the same row: no memory of its own
  args.k.stride[1] = args.v.stride[1] = 0;
  args.k.stride[0] = args.v.stride[0] = 0;
  try {
    attention(args);
    ADD_FAILURE() << "no ResourceError";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find("attention (CPU emulator) on q [1, 1, 4, 16], k/v [1, 1, 1099511627776, 16]: needs"),
              std::string::npos) << e.what();
  }
}

// The largest blocks and split count on a one-query, one-key-block problem: the estimate counts the
// rows and splits there are (one and one), not s1 rows and 1024 splits for every thread (50 GB on 2 cores).
TEST(MemoryBudget, TheEstimateCountsTheRowsAndSplitsThereAre) {
  std::mt19937_64 rng(test::fresh_seed());
  test::Tensor4 q = test::random_tensor(1, 1, 1, 8, rng), kv = test::random_tensor(1, 1, 3, 8, rng);
  test::Tensor4 o = test::make_tensor(1, 1, 1, 8, DType::f32);
  AttentionArgs args{q.view, kv.view, kv.view, o.view};
  args.policy = parse_policy("exact,s1=1024,s2=1024,splits=1024");
  attention(args);
  EXPECT_TRUE(std::isfinite(test::read_bhsd(o.view)[0]));
}

// Only PASA pads K's last key block (its pseudo-averages need whole blocks): the estimate adds that
// block for it alone. It added s2 keys a head for every policy, so 2^19 one-key heads of exact at
// s2 = 1024 needed 56 GB and were refused on machines where they take under 100 MB.
TEST(MemoryBudget, OnlyPasaCountsAPaddedKeyBlock) {
  const ProblemShape one_key_heads{1, 1 << 19, 1 << 19, 1, 1, 8};
  const std::uint64_t exact = emulator_memory_bytes(one_key_heads, parse_policy("exact,s2=1024"));
  const std::uint64_t pasa = emulator_memory_bytes(one_key_heads, parse_policy("pasa,s2=1024"));
  EXPECT_LT(exact, std::uint64_t{1} << 28);  // 2^19 heads of (1 key + 1 query) x ~100 bytes, and the threads'
  EXPECT_GT(pasa, std::uint64_t{1024} * (std::uint64_t{1} << 19) * 96);  // a block of keys a head
}

// Batch and heads broadcast to 2^33 x 2^31 = 2^64 heads: their product wraps to 0 in 64 bits, which
// once passed the budget and computed nothing at all. The emulator and its plan refuse it: the
// output, which needs an element for each of them, reaches past 2^63 bytes; the fp64 reference, which
// makes its own output, for the memory that needs.
TEST(MemoryBudget, BatchTimesHeadsBeyond64BitsIsRefused) {
  if (!available_memory_bytes()) GTEST_SKIP() << "no /proc: available memory unknown";
  // The output above the input in memory, with strides that give each index its own element.
  float memory[2] = {0.5f, 7.0f};
  const TensorView broadcast{&memory[0], DType::f32, {std::int64_t{1} << 33, std::int64_t{1} << 31, 1, 1}, {0, 0, 0, 0}};
  TensorView o = broadcast;
  o.data = &memory[1];
  o.stride = {std::int64_t{1} << 31, 1, 1, 1};
  const AttentionArgs args{broadcast, broadcast, broadcast, o};
  for (const auto& call : std::initializer_list<std::function<void()>>{[&] { attention(args); },
                                                                       [&] { AttentionPlan{args}; }}) {
    test::expect_error(call, "o: sizes [8589934592, 2147483648, 1, 1] with strides [2147483648, 1, 1, 1] "
                             "reach past 2^63 bytes");
  }
  EXPECT_THROW(reference_attention(args), ResourceError);
  test::expect_error([&] { reference_attention(args); }, "reference attention (fp64) on q [8589934592, 2147483648");
  // 2^58 broadcast query rows: the reference's stand-in output once had strides that wrapped to 0 in
  // int64, and the error named o, which it does not take.
  const TensorView rows{&memory[0], DType::f32, {1, 16, std::int64_t{1} << 58, 16}, {0, 0, 0, 0}};
  const TensorView keys{&memory[0], DType::f32, {1, 16, 4, 16}, {0, 0, 0, 0}};
  EXPECT_THROW(reference_attention(AttentionArgs{rows, keys, keys, o}), ResourceError);
  EXPECT_EQ(memory[1], 7.0f);
}

}  // namespace
}  // namespace pasa
