// pasa's per-device memory pool (device_pool.h). The pools are created once and never destroyed:
// destroying them from a static destructor would race the CUDA runtime's own teardown at exit, and
// the driver reclaims everything when the process ends.
#include "cuda/device_pool.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "cuda/cuda_check.h"

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
  check_cuda(cudaMallocFromPoolAsync(&ptr_, bytes, scratch_pool(device), stream),
             "cudaMallocFromPoolAsync (pasa scratch)");
}

StreamBuffer::~StreamBuffer() {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
}

}  // namespace pasa::cuda
