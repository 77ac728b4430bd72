// SPDX-License-Identifier: Apache-2.0
// cuda_write_empty_rows (cuda_backend.h): the result of query rows that see no key at all.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/operand_checks.h"
#include "cuda_backend.h"
#include "pasa/error.h"

namespace pasa {
namespace {

// One CTA per (row, head): the row's O bytes are zero in every dtype, its LSE -inf.
__global__ void write_empty_rows(char* o, long long o_stride_h, long long o_stride_s, int row_bytes, float* lse,
                                 long long lse_stride_h, long long lse_stride_s) {
  const long long s = blockIdx.x, h = blockIdx.y;
  char* row = o + h * o_stride_h + s * o_stride_s;
  for (int i = static_cast<int>(threadIdx.x); i < row_bytes; i += static_cast<int>(blockDim.x)) row[i] = 0;
  if (lse != nullptr && threadIdx.x == 0) lse[h * lse_stride_h + s * lse_stride_s] = -INFINITY;
}

}  // namespace

void cuda_check_empty_rows(const TensorView& o, const LseView& lse) {
  if (o.stride[3] != 1 || o.shape[2] > 0x7fffffff || o.shape[1] > 65535) {
    throw Error("out: the rows of sequences without keys are written on the GPU only for contiguous rows, "
                "at most 65535 heads");
  }
}

void cuda_check_device_memory(const void* data, const char* name) {
  int device = 0;
  cuda::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_device_pointer(data, name, device);
}

void cuda_write_empty_rows(const TensorView& o, const LseView& lse, void* stream) {
  if (o.shape[2] == 0) return;
  const long long elem = static_cast<long long>(dtype_size(o.dtype));
  const dim3 grid(static_cast<unsigned>(o.shape[2]), static_cast<unsigned>(o.shape[1]));
  // (an error the caller's own earlier CUDA call left pending would otherwise be read by the launch
  // check below as this kernel's failure)
  static_cast<void>(cudaGetLastError());
  write_empty_rows<<<grid, 128, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<char*>(o.data), o.stride[1] * elem, o.stride[2] * elem, static_cast<int>(o.shape[3] * elem),
      lse.data, lse.stride[1], lse.stride[2]);
  cuda::check_launch("write_empty_rows launch");
}

}  // namespace pasa
