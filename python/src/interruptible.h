// SPDX-License-Identifier: Apache-2.0
// C++ calls run with the GIL released and stoppable by Ctrl-C: the CPU emulator's loops run the check
// below on the calling thread every 50 ms (src/interrupt.h); it takes the GIL and lets Python run
// its signal handlers, and when a handler raised (KeyboardInterrupt) the call stops and that exception
// is raised in its place. Signals reach the main thread only, so calls from other threads run to the
// end, as any Python code there would.
#pragma once

#include <nanobind/nanobind.h>

#include <utility>

#include "interrupt.h"

namespace pasa::python {

inline bool python_signal_raised() {
  nanobind::gil_scoped_acquire gil;
  return PyErr_CheckSignals() != 0;  // the handler's exception stays set for released_call to raise
}

template <class F>
decltype(auto) released_call(F&& f) {
  const ScopedInterruptCheck check(&python_signal_raised);
  try {
    nanobind::gil_scoped_release release;
    return std::forward<F>(f)();
  } catch (const Interrupted&) {
    if (PyErr_Occurred() != nullptr) throw nanobind::python_error();
    throw;
  }
}

}  // namespace pasa::python
