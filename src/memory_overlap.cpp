// SPDX-License-Identifier: Apache-2.0
#include "memory_overlap.h"

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "pasa/error.h"
#include "text/format.h"

namespace pasa {
namespace {

std::string sizes_text(std::span<const std::int64_t> values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  return out + "]";
}

// [first, last) byte addresses of a view's elements; empty for a view with a dimension of size 0. The
// spans are computed in 128 bits' worth of headroom: sizes and strides are the caller's numbers.
std::pair<__int128, __int128> byte_span(const StridedMemory& m) {
  const auto base = static_cast<__int128>(reinterpret_cast<std::uintptr_t>(m.data));
  __int128 lo = 0, hi = 0;  // element offsets of the extreme elements
  for (std::size_t i = 0; i < m.shape.size(); ++i) {
    if (m.shape[i] <= 0) return {base, base};
    const __int128 reach = static_cast<__int128>(m.shape[i] - 1) * m.stride[i];
    (reach < 0 ? lo : hi) += reach;
  }
  return {base + lo * m.item, base + (hi + 1) * m.item};
}

}  // namespace

StridedMemory memory_of(const TensorView& t) {
  return {t.data, static_cast<std::int64_t>(dtype_size(t.dtype)), t.shape, t.stride};
}

StridedMemory memory_of(const LseView& t) { return {t.data, sizeof(float), t.shape, t.stride}; }

StridedMemory memory_of(const MaskView& t) {
  const std::int64_t item = t.kind == MaskKind::boolean ? 1 : static_cast<std::int64_t>(dtype_size(t.dtype));
  return {t.data, item, t.shape, t.stride};
}

void check_no_self_overlap(const StridedMemory& out, const char* name) {
  // An empty view has no element to share (its size is the error the caller reports).
  if (std::find(out.shape.begin(), out.shape.end(), 0) != out.shape.end()) return;
  std::vector<std::pair<__int128, std::int64_t>> dims;  // (|stride|, size) of each dimension of size > 1
  for (std::size_t i = 0; i < out.shape.size(); ++i) {
    if (out.shape[i] > 1) dims.emplace_back(std::abs(static_cast<__int128>(out.stride[i])), out.shape[i]);
  }
  std::sort(dims.begin(), dims.end());
  __int128 spanned = 0;  // the largest element offset the smaller dimensions reach
  for (const auto& [stride, size] : dims) {
    if (stride <= spanned) {
      throw Error(text::format("{}: sizes {} with strides {} address some elements more than once, so results "
                               "written there would be lost (an output needs its own element for every index: "
                               "no stride of 0, no interleaved dimensions)", name, sizes_text(out.shape),
                               sizes_text(out.stride)));
    }
    spanned += stride * (size - 1);
  }
}

void check_apart(const StridedMemory& out, const char* name, const StridedMemory& other, const char* other_name) {
  const auto [o_first, o_last] = byte_span(out);
  const auto [i_first, i_last] = byte_span(other);
  if (o_first < i_last && i_first < o_last) {
    throw Error(text::format("{}: its memory overlaps {}'s; pass an output that does not alias the "
                             "inputs or the other outputs (the byte ranges the views span must be disjoint)",
                             name, other_name));
  }
}

}  // namespace pasa
