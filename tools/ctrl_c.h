// SPDX-License-Identifier: Apache-2.0
// Ctrl-C during a long command: the first one stops the CPU emulator's loops at their next poll (they
// throw pasa::Interrupted, src/interrupt.h), so that the command can report what it finished; a
// second one kills the process as usual. A command that reports then ends with StoppedByCtrlC.
#pragma once

#include <csignal>
#include <stdexcept>

#include "interrupt.h"

namespace pasa::cli {

// SIGINT's handler for the object's lifetime, installed only over the default action (a handler an
// embedding process set stays), with the emulator's interrupt check on the calling thread.
class CtrlCStops {
 public:
  CtrlCStops();
  ~CtrlCStops();
  // Whether Ctrl-C was pressed while this object lived (also after the emulator's last poll).
  bool pressed() const;
  CtrlCStops(const CtrlCStops&) = delete;
  CtrlCStops& operator=(const CtrlCStops&) = delete;

 private:
  struct sigaction previous_ {};
  bool installed_ = false;
  ScopedInterruptCheck check_;
};

// A command stopped by Ctrl-C after it reported what it finished: main prints the message and exits
// with 130, as a shell reports a process that SIGINT ended.
class StoppedByCtrlC : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pasa::cli
