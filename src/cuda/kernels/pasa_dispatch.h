// SPDX-License-Identifier: Apache-2.0
// The instantiations of the pasa kernels (the sm_90a one and the portable one): input type (fp16,
// bf16), head dim (64, 128) and the policy (pasa, pasa_accurate), chosen from a request. Host code.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "cuda/host/kernel_params.h"
#include "pasa/error.h"

namespace pasa::cuda {

// Calls launch.template operator()<QElem, D, kAccurate>() for the request's input type, head dim and
// policy, or throws naming `kernel` for an input type or head dim it is not built for.
template <class Launch>
void dispatch_pasa(const PasaRequest& r, const char* kernel, Launch&& launch) {
  auto by_dim = [&]<typename QElem, bool kAccurate>() {
    if (r.call.head_dim == 64) {
      launch.template operator()<QElem, 64, kAccurate>();
    } else if (r.call.head_dim == 128) {
      launch.template operator()<QElem, 128, kAccurate>();
    } else {
      throw Error(std::string(kernel) + ": head dim must be 64 or 128");
    }
  };
  auto by_policy = [&]<typename QElem>() {
    r.accurate ? by_dim.template operator()<QElem, true>() : by_dim.template operator()<QElem, false>();
  };
  if (r.call.in_type == ElemType::f16) {
    by_policy.template operator()<__half>();
  } else if (r.call.in_type == ElemType::bf16) {
    by_policy.template operator()<__nv_bfloat16>();
  } else {
    throw Error(std::string(kernel) + ": inputs must be f16 or bf16");
  }
}

}  // namespace pasa::cuda
