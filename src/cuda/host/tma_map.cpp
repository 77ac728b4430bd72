// SPDX-License-Identifier: Apache-2.0
// fp16_row_tile_map (tma.h): the driver's tensor-map encoder, found once through the runtime.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>

#include "cuda/host/tma.h"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status) ==
            cudaSuccess &&
        status == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    } else {
      cudaGetLastError();  // leave no sticky error from the query behind
    }
  });
  if (fn == nullptr) throw Error("the CUDA driver has no cuTensorMapEncodeTiled (a driver for CUDA 12 or newer is needed)");
  return fn;
}

}  // namespace

CUtensorMap fp16_row_tile_map(const Operand& op, int batch, int heads, int seq, int head_dim, int box_rows,
                              const char* what) {
  CUtensorMap map{};
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(seq),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(op.stride_s) * 2, static_cast<cuuint64_t>(op.stride_h) * 2,
                                 static_cast<cuuint64_t>(op.stride_b) * 2};  // bytes, of dims 1..3
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<void*>(op.data), dims, strides, box,
                               unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw Error(std::string(what) + ": the CUDA driver cannot map it for bulk tensor copies (cuTensorMapEncodeTiled "
                "error " + std::to_string(static_cast<int>(r)) + "; strides must be multiples of 16 bytes below 2^40)");
  }
  return map;
}

}  // namespace pasa::cuda
