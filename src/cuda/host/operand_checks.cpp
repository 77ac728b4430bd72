// SPDX-License-Identifier: Apache-2.0
#include "cuda/host/operand_checks.h"

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <string>

#include "attention_checks.h"
#include "pasa/error.h"

namespace pasa {

void check_device_pointer(const void* ptr, const char* name, int device) {
  cudaPointerAttributes attr{};
  const cudaError_t status = cudaPointerGetAttributes(&attr, ptr);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the non-sticky error
    throw Error(std::string(name) + ": cudaPointerGetAttributes failed (" + cudaGetErrorString(status) +
                "); pass device memory");
  }
  if (attr.type == cudaMemoryTypeManaged) return;
  if (attr.type != cudaMemoryTypeDevice) {
    throw Error(std::string(name) + ": pointer is host memory, not device memory (the tensor says "
                "Device::cuda; copy it to the GPU first)");
  }
  if (attr.device != device) {
    throw Error(std::string(name) + ": memory is on CUDA device " + std::to_string(attr.device) +
                " but the current device is " + std::to_string(device));
  }
}

void check_layout(const TensorView& t, const char* name) {
  const std::array<std::int64_t, 4> stride = canonical_strides(t);
  if (stride[3] != 1) {
    throw Error(std::string(name) + ": head-dim stride is " + std::to_string(stride[3]) +
                " (the CUDA kernels need stride[3] == 1, i.e. contiguous rows)");
  }
  const auto elem = static_cast<std::int64_t>(dtype_size(t.dtype));
  static const char* dims[] = {"batch", "heads", "sequence"};
  for (int i = 0; i < 3; ++i) {
    if ((stride[i] * elem) % 16 != 0) {
      throw Error(std::string(name) + ": stride of the " + dims[i] + " dimension (" + std::to_string(stride[i]) +
                  " elements) is not a multiple of 16 bytes (the CUDA kernels need 16-byte aligned rows)");
    }
  }
}

void check_aligned(const void* data, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(data) % 16 != 0) {
    throw Error(std::string(name) + ": data pointer is not 16-byte aligned (the CUDA kernels need "
                "16-byte aligned rows)");
  }
}

void check_lse_aligned(const float* lse) {
  if (reinterpret_cast<std::uintptr_t>(lse) % alignof(float) != 0) {
    throw Error("lse: data pointer is not 4-byte aligned");
  }
}

}  // namespace pasa
