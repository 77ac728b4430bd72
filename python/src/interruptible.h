// SPDX-License-Identifier: Apache-2.0
// C++ calls run with the GIL released and stoppable by Ctrl-C: the CPU emulator's loops run the check
// below on the calling thread every 50 ms (src/interrupt.h); it takes the GIL and lets Python run
// its signal handlers, and when a handler raised (KeyboardInterrupt) the call stops and that exception
// is raised in its place. Signals reach the main thread only, so calls from other threads run to the
// end without the check, as any Python code there would: taking the GIL there to check would stop the
// call while another thread holds it, and end the process at exit (a daemon thread taking the GIL
// during finalization is unwound, through the emulator's OpenMP region).
#pragma once

#include <nanobind/nanobind.h>

#include <unistd.h>

#include <optional>
#include <utility>

#include "interrupt.h"

namespace pasa::python {

inline bool python_signal_raised() {
  nanobind::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;  // the handler's exception stays set for released_call to raise
}

// Whether the calling thread (holding the GIL, which guards the cache) is Python's main thread, the
// one signals reach. Looked up again in a forked child, whose main thread is the one that forked.
inline bool on_main_thread() {
  static pid_t cached_for = -1;
  static unsigned long main_thread = 0;
  if (const pid_t pid = ::getpid(); pid != cached_for) {
    main_thread = nanobind::cast<unsigned long>(
        nanobind::module_::import_("threading").attr("main_thread")().attr("ident"));
    cached_for = pid;
  }
  return PyThread_get_thread_ident() == main_thread;
}

template <class F>
decltype(auto) released_call(F&& f) {
  std::optional<ScopedInterruptCheck> check;
  if (on_main_thread()) check.emplace(&python_signal_raised);
  try {
    nanobind::gil_scoped_release release;
    return std::forward<F>(f)();
  } catch (const Interrupted&) {
    if (PyErr_Occurred() != nullptr) throw nanobind::python_error();
    throw;
  }
}

}  // namespace pasa::python
