// SPDX-License-Identifier: Apache-2.0
#include "cuda/host/device_info.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>

#include "cuda/arch/cuda_check.h"
#include "pasa/error.h"

namespace pasa::cuda {

int smem_limit_from_env() {
  static const int limit = [] {
    const char* v = std::getenv("PASA_CUDA_SMEM_LIMIT");
    if (v == nullptr || *v == '\0') return std::numeric_limits<int>::max();
    char* end = nullptr;
    errno = 0;
    const long bytes = std::strtol(v, &end, 10);
    if (*end != '\0' || errno != 0 || bytes < 1 || bytes > std::numeric_limits<int>::max()) {
      throw Error(std::string("PASA_CUDA_SMEM_LIMIT: '") + v + "' is not a positive number of bytes");
    }
    return static_cast<int>(bytes);
  }();
  return limit;
}

const DeviceInfo& device_info(int device) {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static DeviceInfo info[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) {
    throw Error("CUDA device " + std::to_string(device) + ": pasa supports device ordinals below 64");
  }
  std::call_once(once[device], [device] {  // an exception leaves the flag unset: the next call retries
    DeviceInfo d{};
    check_cuda(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute(multiprocessor count)");
    check_cuda(cudaDeviceGetAttribute(&d.l2_bytes, cudaDevAttrL2CacheSize, device),
               "cudaDeviceGetAttribute(L2 cache size)");
    check_cuda(cudaDeviceGetAttribute(&d.max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "cudaDeviceGetAttribute(shared memory per block)");
    d.max_smem = std::min(d.max_smem, smem_limit_from_env());
    info[device] = d;
  });
  return info[device];
}

std::string sm_name(const DeviceInfo& d) { return "sm_" + std::to_string(d.major) + std::to_string(d.minor); }

std::string device_text(int device, const DeviceInfo& d) {
  cudaDeviceProp prop{};
  const std::string name =
      cudaGetDeviceProperties(&prop, device) == cudaSuccess ? std::string(prop.name) + ", " : std::string();
  cudaGetLastError();
  return "CUDA device " + std::to_string(device) + " (" + name + sm_name(d) + ")";
}

int check_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceInfo& d = device_info(device);
  if (d.major < 8) {
    throw Error(device_text(device, d) + " has compute capability " + std::to_string(d.major) + "." +
                std::to_string(d.minor) + "; the pasa kernels need 8.0 or newer (Ampere, Ada, Hopper, "
                "Blackwell)");
  }
  return device;
}

bool portable_path_from_env() {
  static const std::string value = [] {
    const char* v = std::getenv("PASA_CUDA_PATH");
    return std::string(v == nullptr ? "" : v);
  }();
  if (value.empty() || value == "auto") return false;
  if (value == "portable") return true;
  throw Error("PASA_CUDA_PATH: '" + value + "' is not a CUDA kernel path (auto or portable)");
}

}  // namespace pasa::cuda
