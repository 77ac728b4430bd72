// SPDX-License-Identifier: Apache-2.0
// A long step of a command (reading the inputs, the attention, the fp64 reference): an allocation that
// fails in it is reported with the step's name, and a step that runs long says so on stderr.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <string>

#include <pthread.h>

#include "pasa/error.h"

namespace pasa::cli {

// While alive, prints "pasa: <what>: still running (N s)" on stderr 10 s after it was made and every
// 30 s after that, so a step that takes minutes shows it has not hung; a short one prints nothing.
class StageHeartbeat {
 public:
  explicit StageHeartbeat(std::string what);
  ~StageHeartbeat();
  StageHeartbeat(const StageHeartbeat&) = delete;
  StageHeartbeat& operator=(const StageHeartbeat&) = delete;

 private:
  void beat();  // the thread's loop

  std::string what_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  pthread_t thread_{};
  bool started_ = false;
};

// Runs `step` under a StageHeartbeat. A std::bad_alloc from it (an allocation the library's own memory
// estimates did not foresee, e.g. under a tight ulimit -v) becomes a pasa::ResourceError naming `what`.
template <typename Step>
decltype(auto) run_stage(const std::string& what, Step&& step) {
  const StageHeartbeat heartbeat(what);
  try {
    return step();
  } catch (const std::bad_alloc&) {
    throw ResourceError("out of memory in " + what + " (an allocation failed; try a smaller problem)");
  }
}

}  // namespace pasa::cli
