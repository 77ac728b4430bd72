// SPDX-License-Identifier: Apache-2.0
// pasa's per-device memory pool (device_pool.h). The pools are created once and never destroyed:
// destroying them from a static destructor would race the CUDA runtime's own teardown at exit, and
// the driver reclaims everything when the process ends.
#include "cuda/host/device_pool.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "cuda/arch/cuda_check.h"

namespace pasa::cuda {

cudaMemPool_t scratch_pool(int device) {
  static std::mutex mutex;
  static std::map<int, cudaMemPool_t> pools;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = pools.find(device); it != pools.end()) return it->second;

  int supported = 0;
  check_cuda(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device),
             "cudaDeviceGetAttribute(memory pools supported)");
  if (supported == 0) {
    throw Error("CUDA device " + std::to_string(device) + " does not support stream-ordered memory pools");
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate (pasa scratch pool)");
  // Keep everything: memory goes back to the driver only when the process ends.
  std::uint64_t threshold = UINT64_MAX;
  const cudaError_t status = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (status != cudaSuccess) {
    cudaMemPoolDestroy(pool);
    check_cuda(status, "cudaMemPoolSetAttribute(release threshold)");
  }
  pools.emplace(device, pool);
  return pool;
}

StreamBuffer::StreamBuffer(std::size_t bytes, int device, cudaStream_t stream) : stream_(stream) {
  if (bytes == 0) return;
  const cudaMemPool_t pool = scratch_pool(device);
  cudaError_t status = cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream);
  if (status == cudaErrorMemoryAllocation) {
    // Out of memory is not a sticky error: the context stays usable, but the runtime also records it
    // as the thread's last error, which the next launch check would report as its own. Clear it,
    // hand the pool's idle memory back to the driver, and try once more.
    cudaGetLastError();
    cudaMemPoolTrimTo(pool, 0);
    status = cudaMallocFromPoolAsync(&ptr_, bytes, pool, stream);
  }
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ptr_ = nullptr;
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    cudaGetLastError();
    throw ResourceError("CUDA device " + std::to_string(device) + ": out of memory for " +
                        std::to_string(bytes) + " bytes of pasa scratch (" + std::to_string(free_bytes) +
                        " of " + std::to_string(total_bytes) + " bytes free); the device remains usable");
  }
  check_cuda(status, "cudaMallocFromPoolAsync (pasa scratch)");
}

StreamBuffer::~StreamBuffer() {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
}

}  // namespace pasa::cuda
