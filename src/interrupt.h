// SPDX-License-Identifier: Apache-2.0
// Stopping a long CPU call from its caller (the Python binding's Ctrl-C). The caller installs a check
// on its own thread for the length of the call (ScopedInterruptCheck). Only that thread may run it
// (it takes the Python GIL); parallel_for runs it there between iterations and, once the calling
// thread has no iterations left, every kIdlePollInterval while the others finish theirs, at most every
// kInterruptInterval. When it returns true the loop's stop flag is set: the remaining iterations are
// skipped, and an iteration that polls from inside (poll_interrupt: a decode row of millions of keys
// is one iteration) throws Interrupted on whichever thread runs it. Calls without a check (C++
// callers install none) pay a flag test a poll.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "pasa/error.h"

namespace pasa {

// What a stopped call throws once its caller's check returned true. Its outputs are partly written.
class Interrupted : public Error {
 public:
  Interrupted() : Error("interrupted") {}
};

using InterruptCheck = bool (*)();
inline thread_local InterruptCheck t_interrupt_check = nullptr;
// When the check last ran on this thread: the interval holds across a call's loops and scans.
inline thread_local std::chrono::steady_clock::time_point t_last_check{};

// The check of the calling thread for as long as this object lives.
class ScopedInterruptCheck {
 public:
  explicit ScopedInterruptCheck(InterruptCheck check) : previous_(t_interrupt_check) {
    t_interrupt_check = check;
    t_last_check = {};  // the call's first poll checks at once
  }
  ~ScopedInterruptCheck() { t_interrupt_check = previous_; }
  ScopedInterruptCheck(const ScopedInterruptCheck&) = delete;
  ScopedInterruptCheck& operator=(const ScopedInterruptCheck&) = delete;

 private:
  InterruptCheck previous_;
};

// A responsive Ctrl-C without slowing the loop: a check takes the Python GIL.
constexpr std::chrono::milliseconds kInterruptInterval{50};
// How many rows (or keys) a pass over a whole tensor handles between polls: a clock read per this
// many costs nothing next to the rows' work, and a million-key pass still polls every few ms.
constexpr std::int64_t kRowsPerPoll = 4096;
// How often the calling thread, out of iterations, wakes to check while the others finish theirs.
constexpr std::chrono::milliseconds kIdlePollInterval{10};

// One parallel loop's polling: made on the calling thread, polled from any thread of the loop.
class InterruptPoll {
 public:
  explicit InterruptPoll(const InterruptPoll* parent = nullptr)
      : check_(t_interrupt_check), caller_(std::this_thread::get_id()), parent_(parent) {}

  bool on_caller() const { return std::this_thread::get_id() == caller_; }
  bool has_check() const { return check_ != nullptr; }

  // Throws Interrupted when the loop (or the loop it runs inside) was stopped, or, on the calling
  // thread, when its check is due and says so (which stops the loop).
  void poll() {
    if (stopped()) throw Interrupted();
    if (check_ == nullptr || !on_caller()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - t_last_check < kInterruptInterval) return;
    t_last_check = now;
    if (check_()) {
      stop();
      throw Interrupted();
    }
  }

  // Stops the loop: its remaining iterations are skipped, and those that poll from inside throw.
  void stop() { stop_.store(true, std::memory_order_relaxed); }

 private:
  bool stopped() const {
    return stop_.load(std::memory_order_relaxed) || (parent_ != nullptr && parent_->stopped());
  }

  InterruptCheck check_;
  std::thread::id caller_;
  const InterruptPoll* parent_;
  std::atomic<bool> stop_{false};
};

// The parallel loop this thread is running an iteration of (parallel_for sets it on each of the
// loop's threads), so that a long iteration can poll it from inside.
inline thread_local InterruptPoll* t_loop_poll = nullptr;

// The loop's poll on this thread while this object lives (restoring an enclosing loop's after).
class ScopedLoopPoll {
 public:
  explicit ScopedLoopPoll(InterruptPoll* poll) : outer_(t_loop_poll) { t_loop_poll = poll; }
  ~ScopedLoopPoll() { t_loop_poll = outer_; }
  ScopedLoopPoll(const ScopedLoopPoll&) = delete;
  ScopedLoopPoll& operator=(const ScopedLoopPoll&) = delete;

 private:
  InterruptPoll* outer_;
};

// Inside a parallel_for iteration: throws Interrupted once the loop is stopped (or, on the calling
// thread, when its due check says so); outside any loop, nothing. About as cheap as a clock read on
// the calling thread: call it once per key block or every few thousand rows, not per element.
inline void poll_interrupt() {
  if (t_loop_poll != nullptr) t_loop_poll->poll();
}

}  // namespace pasa
