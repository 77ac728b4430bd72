// SPDX-License-Identifier: Apache-2.0
#include "stage.h"

#include <pthread.h>

#include "text/format.h"

namespace pasa::cli {

// The heartbeat's stack: it only formats a line now and then. The default (8 MiB) would take address
// space that OpenMP's worker threads need under a tight ulimit -v, and libgomp ends the process when
// it cannot start them.
constexpr std::size_t kStackBytes = 256 * 1024;

StageHeartbeat::StageHeartbeat(std::string what) : what_(std::move(what)) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setstacksize(&attr, kStackBytes);
  // (No thread to spare, under a tight ulimit -v: the step runs without the lines.)
  started_ = pthread_create(
                 &thread_, &attr,
                 [](void* self) -> void* {
                   static_cast<StageHeartbeat*>(self)->beat();
                   return nullptr;
                 },
                 this) == 0;
  pthread_attr_destroy(&attr);
}

void StageHeartbeat::beat() {
  const auto start = std::chrono::steady_clock::now();
  auto next = start + std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_until(lock, next, [this] { return done_; })) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    text::print(text::progress_stream(), "pasa: {}: still running ({:.0f} s)\n", what_, seconds);
    next += std::chrono::seconds(30);
  }
}

StageHeartbeat::~StageHeartbeat() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_one();
  if (started_) pthread_join(thread_, nullptr);
}

}  // namespace pasa::cli
