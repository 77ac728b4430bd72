// SPDX-License-Identifier: Apache-2.0
// Stopping a long CPU call from its caller (the Python binding's Ctrl-C). The caller installs a check
// on its own thread for the length of the call (ScopedInterruptCheck); parallel_for runs it on that
// thread between iterations (at the first, then at most every kInterruptInterval) and stops the call
// with Interrupted once it returns true. Calls without a check (C++ callers install none) pay a null
// test an iteration, the other threads of a loop with one a thread-id compare.
#pragma once

#include <chrono>
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

// The check of the calling thread for as long as this object lives.
class ScopedInterruptCheck {
 public:
  explicit ScopedInterruptCheck(InterruptCheck check) : previous_(t_interrupt_check) { t_interrupt_check = check; }
  ~ScopedInterruptCheck() { t_interrupt_check = previous_; }
  ScopedInterruptCheck(const ScopedInterruptCheck&) = delete;
  ScopedInterruptCheck& operator=(const ScopedInterruptCheck&) = delete;

 private:
  InterruptCheck previous_;
};

// A responsive Ctrl-C without slowing the loop: a check takes the Python GIL.
constexpr std::chrono::milliseconds kInterruptInterval{50};

// One parallel loop's polling: made on the calling thread, polled from any thread.
class InterruptPoll {
 public:
  InterruptPoll() : check_(t_interrupt_check), caller_(std::this_thread::get_id()) {}

  // Throws Interrupted on the calling thread when its check, due, says so.
  void poll() {
    if (check_ == nullptr || std::this_thread::get_id() != caller_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < kInterruptInterval) return;
    last_ = now;
    if (check_()) throw Interrupted();
  }

 private:
  InterruptCheck check_;
  std::thread::id caller_;
  std::chrono::steady_clock::time_point last_{};  // the caller's only; the first poll checks at once
};

}  // namespace pasa
