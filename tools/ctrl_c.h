// SPDX-License-Identifier: Apache-2.0
// Ctrl-C during a long command: the first one stops the CPU emulator's loops at their next poll (they
// throw pasa::Interrupted, src/interrupt.h), so that the command can report what it finished; a
// second one kills the process as usual. A command that reports then ends with StoppedByCtrlC.
#pragma once

#include <csignal>
#include <stdexcept>
#include <string>
#include <utility>

#include "interrupt.h"

namespace pasa::cli {

// SIGINT's handler for the object's lifetime, installed only over the default action or the handler
// that removes pending outputs (io/atomic_file.h; a handler an embedding process set stays), with the
// emulator's interrupt check on the calling thread.
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
// with 130, as a shell reports a process that SIGINT ended. unprinted(): the message for when that
// report did not reach standard output (full, or a pipe whose reader the Ctrl-C ended too).
class StoppedByCtrlC : public std::runtime_error {
 public:
  StoppedByCtrlC(const std::string& message, std::string unprinted)
      : std::runtime_error(message), unprinted_(std::move(unprinted)) {}
  const std::string& unprinted() const { return unprinted_; }

 private:
  std::string unprinted_;
};

}  // namespace pasa::cli
