// SPDX-License-Identifier: Apache-2.0
// The GPU commands (bench, overhead) on a machine without a usable GPU: the library says so with a
// pasa::Error, but a missing device is the machine's lack, not a bad command line.
#pragma once

#include <string>

#include "cuda_backend.h"
#include "pasa/error.h"

namespace pasa::cli {

// Returns call(); a pasa::Error from it while no usable GPU is present is rethrown as a
// pasa::ResourceError (exit 1), its message prefixed with `command` ("pasa overhead --device cuda"):
// the library's words name no command.
template <typename Call>
auto on_gpu(const std::string& command, Call&& call) {
  try {
    return call();
  } catch (const ResourceError&) {
    throw;
  } catch (const Error& e) {
    if (!cuda_backend_available()) throw ResourceError(command + ": " + e.what());
    throw;
  }
}

}  // namespace pasa::cli
