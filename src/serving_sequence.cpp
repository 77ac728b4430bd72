// SPDX-License-Identifier: Apache-2.0
// One sequence of a serving batch as a dense problem for the emulator.
#include "serving_sequence.h"

#include <limits>
#include <string>

#include "attention_checks.h"
#include "cpu/backends.h"
#include "cpu/operands.h"
#include "memory_budget.h"
#include "pasa/error.h"
#include "pasa/serving.h"
#include "storage_convert.h"

namespace pasa {

TensorView packed_view(void* data, DType dtype, std::int64_t total, std::int64_t H, std::int64_t D,
                       Device device) {
  return bshd_view(data, dtype, 1, total, H, D, device);
}

TensorView slice_rows(const TensorView& t, std::int64_t b, std::int64_t s0, std::int64_t len) {
  TensorView out = t;
  const std::int64_t offset = b * t.stride[0] + s0 * t.stride[2];
  out.data = static_cast<char*>(t.data) + offset * static_cast<std::int64_t>(dtype_size(t.dtype));
  out.shape = {1, t.shape[1], len, t.shape[3]};
  return out;
}

LseView slice_rows(const LseView& lse, std::int64_t b, std::int64_t s0, std::int64_t len) {
  if (lse.data == nullptr) return lse;
  LseView out = lse;
  out.data = lse.data + b * lse.stride[0] + s0 * lse.stride[2];
  out.shape = {1, lse.shape[1], len};
  return out;
}

bool serving_on_gpu(const AttentionArgs& options, const TensorView& q) {
  if (q.device == Device::cuda) {
    if (options.backend == Backend::emulator) {
      throw Error("backend: the CPU emulator needs host tensors, but q is on the GPU");
    }
    return true;
  }
  if (options.backend == Backend::cuda) {
    throw Error("backend: the CUDA kernels need device tensors, but q is a host tensor (Device::cpu)");
  }
  return false;
}

void refuse_serving_mask(const AttentionArgs& options, const char* call) {
  if (options.mask.kind == MaskKind::none) return;
  throw Error(std::string("attn_mask: ") + call + " takes no mask (a [B, H_q, S_q, S_kv] mask cannot follow "
              "each sequence's own length); use causal or window_size, or pasa::attention per sequence");
}

void require_sequence_memory(const ProblemShape& largest, const Policy& policy, std::uint64_t extra_bytes,
                             ViewForm form) {
  require_memory(saturating_sum({emulator_memory_bytes(largest, policy), extra_bytes}),
                 "attention (CPU emulator) on the batch's largest sequence, " + problem_text(largest, form));
}

void run_sequence(const AttentionArgs& options, const TensorView& q, const TensorView& k,
                  const TensorView& v, const TensorView& o, const LseView& lse, AttentionStats& stats) {
  if (q.seq() == 0) return;
  if (k.seq() == 0) {
    for (std::int64_t h = 0; h < o.heads(); ++h) {
      for (std::int64_t s = 0; s < o.seq(); ++s) {
        for (std::int64_t d = 0; d < o.dim(); ++d) {
          store_from_double(o.data, o.dtype, o.offset(0, h, s, d), 0.0);
        }
        if (lse.data != nullptr) {
          lse.data[h * lse.stride[1] + s * lse.stride[2]] = -std::numeric_limits<float>::infinity();
        }
      }
    }
    stats.rows += o.heads() * o.seq();
    return;
  }
  AttentionArgs a = options;
  a.q = q;
  a.k = k;
  a.v = v;
  a.o = o;
  a.lse = lse;
  AttentionStats one;
  a.stats = &one;
  emulate_attention(a, check_attention_args(a));
  stats.rows += one.rows;
  stats.recomputed_rows += one.recomputed_rows;
}

}  // namespace pasa
