// SPDX-License-Identifier: Apache-2.0
#include "stage.h"

#include <system_error>

#include "text/format.h"

namespace pasa::cli {

StageHeartbeat::StageHeartbeat(std::string what) : what_(std::move(what)) {
  try {
    thread_ = std::thread([this] { beat(); });
  } catch (const std::system_error&) {
    // No thread to spare (a tight ulimit -v has no room for its stack): the step runs without the lines.
  }
}

void StageHeartbeat::beat() {
  const auto start = std::chrono::steady_clock::now();
  auto next = start + std::chrono::seconds(10);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_until(lock, next, [this] { return done_; })) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    text::print(stderr, "pasa: {}: still running ({:.0f} s)\n", what_, seconds);
    next += std::chrono::seconds(30);
  }
}

StageHeartbeat::~StageHeartbeat() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pasa::cli
