// SPDX-License-Identifier: Apache-2.0
#include "ctrl_c.h"

#include <atomic>

#include "io/atomic_file.h"

namespace pasa::cli {
namespace {

std::atomic<bool> g_pressed{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

extern "C" void on_ctrl_c(int) { g_pressed.store(true); }

bool ctrl_c_pressed() { return g_pressed.load(); }

}  // namespace

CtrlCStops::CtrlCStops() : check_(&ctrl_c_pressed) {
  g_pressed.store(false);
  struct sigaction current {};
  sigaction(SIGINT, nullptr, &current);
  // (over the default action, or over the handler that removes pending outputs, which a made --plot
  // folder installs: the Ctrl-C then stops the work instead, and the command removes the folder itself)
  if (current.sa_handler != SIG_DFL && !io::detail::is_cleanup_handler(current.sa_handler)) return;
  struct sigaction ours {};
  ours.sa_handler = on_ctrl_c;
  // SA_RESETHAND: the second Ctrl-C ends the process; SA_RESTART: the first interrupts no system call
  // (a write to stderr would otherwise fail with EINTR).
  ours.sa_flags = SA_RESETHAND | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  installed_ = sigaction(SIGINT, &ours, &previous_) == 0;
}

bool CtrlCStops::pressed() const { return g_pressed.load(); }

CtrlCStops::~CtrlCStops() {
  if (installed_) sigaction(SIGINT, &previous_, nullptr);
}

}  // namespace pasa::cli
