// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of a build without CUDA: every request is a clear error.
#include "cuda_backend.h"
#include "pasa/error.h"

namespace pasa {

bool cuda_backend_available() { return false; }

void cuda_attention(const AttentionArgs&, const ProblemShape&) {
  throw Error("this build of pasa has no CUDA backend (configure with nvcc on the PATH to build the "
              "kernels); use host tensors for the CPU backends");
}

}  // namespace pasa
