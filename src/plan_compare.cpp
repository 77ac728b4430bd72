// SPDX-License-Identifier: Apache-2.0
#include "plan_compare.h"

#include <array>
#include <cstddef>
#include <cstdint>

#include "pasa/error.h"
#include "text/format.h"

namespace pasa {
namespace {

// Strides compared where they address something: a size-1 dimension's index is always 0.
template <std::size_t N>
bool same_strides(const std::array<std::int64_t, N>& shape, const std::array<std::int64_t, N>& a,
                  const std::array<std::int64_t, N>& b) {
  for (std::size_t i = 0; i < N; ++i) {
    if (shape[i] != 1 && a[i] != b[i]) return false;
  }
  return true;
}

bool same_mask(const MaskView& a, const MaskView& b) {  // (not the pointer: run checks a null one)
  if (a.kind != b.kind) return false;
  if (a.kind == MaskKind::none) return true;
  return (a.kind != MaskKind::additive || a.dtype == b.dtype) && a.shape == b.shape &&
         same_strides(a.shape, a.stride, b.stride) && a.device == b.device;
}

}  // namespace

bool same_view(const TensorView& a, const TensorView& b) {
  return a.dtype == b.dtype && a.shape == b.shape && same_strides(a.shape, a.stride, b.stride) &&
         a.device == b.device;
}

bool same_lse(const LseView& a, const LseView& b) {
  if ((a.data == nullptr) != (b.data == nullptr)) return false;
  return a.data == nullptr || (a.shape == b.shape && same_strides(a.shape, a.stride, b.stride) && a.device == b.device);
}

const char* differing_field(const AttentionArgs& call, const AttentionArgs& plan) {
  if (!same_view(call.q, plan.q)) return "q";
  if (!same_view(call.k, plan.k)) return "k";
  if (!same_view(call.v, plan.v)) return "v";
  if (!same_view(call.o, plan.o)) return "o";
  if (!same_lse(call.lse, plan.lse)) return "lse";
  if (call.scale != plan.scale) return "scale";
  if (call.causal != plan.causal) return "causal";
  if (call.alignment != plan.alignment) return "alignment";
  if (call.window_left != plan.window_left) return "window_left";
  if (call.window_right != plan.window_right) return "window_right";
  if (call.softcap != plan.softcap) return "softcap";
  if (!same_mask(call.mask, plan.mask)) return "mask";
  if (call.backend != plan.backend) return "backend";
  if (call.cuda_path != plan.cuda_path) return "cuda_path";
  // (the preset's name too, which policies' equality leaves out: validate() refuses an unknown one)
  if (call.policy != plan.policy || call.policy.preset != plan.policy.preset) return "policy";
  return nullptr;
}

void check_same_problem(const char* field) {
  if (field == nullptr) return;
  throw Error(text::format("{}: differs from the problem the plan was made for (a plan runs one problem; "
                           "make a new plan for this one)", field));
}

void check_workspace(std::size_t needed, const void* workspace) {
  if (needed == 0) return;
  if (workspace == nullptr) {
    throw Error(text::format("workspace: null, but the plan needs {} bytes (workspace_bytes())", needed));
  }
  // (the kernels store float4 partials and 64-bit counters there: a misaligned one would stop the
  // context with a misaligned address instead)
  if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0) {
    throw Error(text::format("workspace: 0x{:x} is not 256-byte aligned (cudaMalloc's pointers are)",
                             reinterpret_cast<std::uintptr_t>(workspace)));
  }
}

void check_data_pointers(std::initializer_list<std::pair<const TensorView*, const char*>> tensors) {
  for (const auto& [t, name] : tensors) {
    if (t->data == nullptr) throw Error(text::format("{}: data pointer is null", name));
  }
}

}  // namespace pasa
