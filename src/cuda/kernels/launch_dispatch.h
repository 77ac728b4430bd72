// SPDX-License-Identifier: Apache-2.0
// The launchers' choice of instantiation from a call's run-time input type, head dim and policy: each
// calls launch.template operator()<...>() with the compile-time values, or throws naming `kernel` for
// what it is not built for. Host code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/host/kernel_params.h"
#include "pasa/error.h"

namespace pasa::cuda {

// <Elem>: __half or __nv_bfloat16.
template <class Launch>
void dispatch_16bit(ElemType in_type, const char* kernel, Launch&& launch) {
  if (in_type == ElemType::f16) {
    launch.template operator()<__half>();
  } else if (in_type == ElemType::bf16) {
    launch.template operator()<__nv_bfloat16>();
  } else {
    throw Error(std::string(kernel) + ": inputs must be f16 or bf16");
  }
}

// <D>: the head dim, one of kDims (listed in the error otherwise).
template <int... kDims, class Launch>
void dispatch_head_dim(int head_dim, const char* kernel, Launch&& launch) {
  const bool launched = ((head_dim == kDims && (launch.template operator()<kDims>(), true)) || ...);
  if (!launched) {
    std::string dims;
    ((dims += (dims.empty() ? "" : ", ") + std::to_string(kDims)), ...);
    throw Error(std::string(kernel) + ": head dim must be one of " + dims);
  }
}

// <QElem, D, kAccurate>: the pasa kernels' instantiations, D one of kDims (sm_90a: 64, 128; portable:
// 64, 96, 128, 256).
template <int... kDims, class Launch>
void dispatch_pasa(const PasaRequest& r, const char* kernel, Launch&& launch) {
  dispatch_16bit(r.call.in_type, kernel, [&]<typename QElem>() {
    dispatch_head_dim<kDims...>(r.call.head_dim, kernel, [&]<int D>() {
      r.accurate ? launch.template operator()<QElem, D, true>() : launch.template operator()<QElem, D, false>();
    });
  });
}

}  // namespace pasa::cuda
