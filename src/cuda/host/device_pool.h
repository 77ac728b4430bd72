// SPDX-License-Identifier: Apache-2.0
// pasa's own stream-ordered memory pool (one per device) and a scratch buffer allocated from it.
//
// Why a pool of our own: cudaMallocAsync takes from the device's default pool, whose release
// threshold is 0, so every synchronize hands the memory back to the driver and the next call maps it
// again (0.1-0.4 ms a call for PASA's 128-256 MB K' scratch, bench/NOTES.md). Raising the default
// pool's threshold would change it for every other library in the process; instead pasa creates one
// pool per device, once, with a release threshold of UINT64_MAX: it keeps what it has grown to (its
// high-water mark of concurrent scratch) for the life of the process and never synchronizes.
// Allocations are stream-ordered on the caller's stream (cudaMallocFromPoolAsync / cudaFreeAsync),
// so calls stay asynchronous and CUDA-graph capturable (under capture the allocation becomes a graph
// memory node with the pool's properties).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace pasa::cuda {

// The pool of `device`, created on first use (thread-safe). Throws pasa::Error on a CUDA error.
cudaMemPool_t scratch_pool(int device);

// A device buffer from scratch_pool(device), allocated and freed on `stream` (freed when it goes out
// of scope, after the work queued on the stream before the destructor). A zero-byte buffer is null.
// n rounded up to 256 bytes: scratch carved into several arrays keeps each one aligned like an allocation.
inline std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

class StreamBuffer {
 public:
  StreamBuffer(std::size_t bytes, int device, cudaStream_t stream);
  ~StreamBuffer();
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace pasa::cuda
