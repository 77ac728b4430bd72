// SPDX-License-Identifier: Apache-2.0
// Benchmarking in a build without CUDA: a clear error, which names no command (the library's callers
// are several: `pasa bench`, `pasa overhead --device cuda`, C++ programs); the CLI names its own.
#include "host_timing.h"
#include "pasa/bench.h"
#include "pasa/error.h"

namespace pasa {

namespace {
[[noreturn]] void no_cuda() {
  throw Error("there are no CUDA kernels to time: this build of pasa has none (it was built without nvcc "
              "on the PATH, or with PASA_ENABLE_CUDA=OFF; build it again with nvcc on the PATH and "
              "PASA_ENABLE_CUDA unset or ON, and run on a GPU of compute capability 8.0 or newer)");
}
}  // namespace

BenchTiming bench_cuda_attention(const BenchPoint&, int, int, std::uint64_t) { no_cuda(); }

std::string bench_device_description() { no_cuda(); }

HostOverhead bench_host_overhead_gpu(const BenchPoint&, int) { no_cuda(); }

}  // namespace pasa
