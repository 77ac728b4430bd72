// SPDX-License-Identifier: Apache-2.0
#include "memory_overlap.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <utility>

#include "pasa/error.h"
#include "text/format.h"

namespace pasa {
namespace {

constexpr std::size_t kMaxRank = 8;  // the views here have at most 5 dimensions (the caches' halves)

std::string sizes_text(std::span<const std::int64_t> values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(values[i]);
  return out + "]";
}

// (size - 1) * stride in 128 bits, held within +-2^100: sizes and strides are the caller's numbers (up
// to 2^63 each), and a reach that far exceeds any memory, so holding it there keeps the sums below
// and their byte counts clear of overflow without changing what they decide.
__int128 reach_of(std::int64_t size, __int128 stride) {
  constexpr __int128 kFar = static_cast<__int128>(1) << 100;
  const __int128 reach = static_cast<__int128>(size - 1) * stride;
  return reach > kFar ? kFar : reach < -kFar ? -kFar : reach;
}

// [first, last) byte addresses of a view's elements; empty for a view with a dimension of size 0.
std::pair<__int128, __int128> byte_span(const StridedMemory& m) {
  const auto base = static_cast<__int128>(reinterpret_cast<std::uintptr_t>(m.data));
  __int128 lo = 0, hi = 0;  // element offsets of the extreme elements
  for (std::size_t i = 0; i < m.shape.size(); ++i) {
    if (m.shape[i] <= 0) return {base, base};
    const __int128 reach = reach_of(m.shape[i], m.stride[i]);
    (reach < 0 ? lo : hi) += reach;
  }
  return {base + lo * m.item, base + (hi + 1) * m.item};
}

// check_no_self_overlap's rule: the dimensions of size > 1, by |stride|, each step past all that the
// smaller ones span. An empty view has no element to share (its size is the error the caller reports).
bool addresses_distinct(const StridedMemory& m) {
  if (std::find(m.shape.begin(), m.shape.end(), 0) != m.shape.end()) return true;
  if (m.shape.size() > kMaxRank) return false;  // no output of these APIs has that many dimensions
  // (|stride|, size) of each dimension of size > 1, on the stack: every call and plan run checks here.
  std::array<std::pair<__int128, std::int64_t>, kMaxRank> dims;
  std::size_t n = 0;
  for (std::size_t i = 0; i < m.shape.size(); ++i) {
    // (|stride| by hand: std::abs has no __int128 overload in strict ISO C++ mode)
    const __int128 stride = m.stride[i];
    if (m.shape[i] > 1) dims[n++] = {stride < 0 ? -stride : stride, m.shape[i]};
  }
  // (an insertion sort of at most kMaxRank entries: std::sort's inlined code over the array's unused
  // tail made g++ 12 warn of out-of-bounds reads that the n <= kMaxRank bound rules out)
  for (std::size_t i = 1; i < n; ++i) {
    for (std::size_t j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  }
  __int128 spanned = 0;  // the largest element offset the smaller dimensions reach
  for (std::size_t i = 0; i < n; ++i) {
    if (dims[i].first <= spanned) return false;
    spanned += reach_of(dims[i].second, dims[i].first);
  }
  return true;
}

}  // namespace

void check_reach(const StridedMemory& m, const char* name) {
  const auto [first, last] = byte_span(m);  // (each dimension's reach held within 2^100: no overflow)
  constexpr auto kAddresses = static_cast<__int128>(UINTPTR_MAX) + 1;
  if (last - first > std::numeric_limits<std::int64_t>::max() || first < 0 || last > kAddresses) {
    throw Error(text::format("{}: sizes {} with strides {} reach past 2^63 bytes or the address space from "
                             "the data pointer", name, sizes_text(m.shape), sizes_text(m.stride)));
  }
}

StridedMemory memory_of(const TensorView& t) {
  return {t.data, static_cast<std::int64_t>(dtype_size(t.dtype)), t.shape, t.stride};
}

StridedMemory memory_of(const LseView& t) { return {t.data, sizeof(float), t.shape, t.stride}; }

StridedMemory memory_of(const MaskView& t) {
  const std::int64_t item = t.kind == MaskKind::boolean ? 1 : static_cast<std::int64_t>(dtype_size(t.dtype));
  return {t.data, item, t.shape, t.stride};
}

void check_no_self_overlap(const StridedMemory& out, const char* name) {
  if (!addresses_distinct(out)) {
    throw Error(text::format("{}: sizes {} with strides {} address some elements more than once, so results "
                             "written there would be lost (an output needs its own element for every index: "
                             "no stride of 0, no interleaved dimensions)", name, sizes_text(out.shape),
                             sizes_text(out.stride)));
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

StridedMemory memory_of(const std::int32_t* data, const std::int64_t& count) {
  static constexpr std::int64_t kUnit = 1;
  return {data, 4, {&count, 1}, {&kUnit, 1}};
}

bool same_layout(const StridedMemory& a, const StridedMemory& b) {
  if (a.item != b.item || !std::equal(a.shape.begin(), a.shape.end(), b.shape.begin(), b.shape.end())) return false;
  for (std::size_t i = 0; i < a.shape.size(); ++i) {
    if (a.shape[i] > 1 && a.stride[i] != b.stride[i]) return false;  // (a size-1 dimension's stride addresses nothing)
  }
  return true;
}

void check_written(const NamedMemory& out, std::span<const NamedMemory> others) {
  check_no_self_overlap(out.memory, out.name);
  check_apart_from(out, others);
}

void check_apart_from(const NamedMemory& out, std::span<const NamedMemory> others) {
  for (const NamedMemory& other : others) check_apart(out.memory, out.name, other.memory, other.name);
}

void check_outputs_apart(const TensorView& o, const LseView& lse, std::span<const NamedMemory> read) {
  check_apart_from({memory_of(o), "o"}, read);
  if (lse.data != nullptr) check_apart_from({memory_of(lse), "lse"}, read);
}

void check_outputs(const TensorView& o, const LseView& lse, std::span<const NamedMemory> read) {
  const NamedMemory out{memory_of(o), "o"};
  check_written(out, read);
  if (lse.data == nullptr) return;
  std::array<NamedMemory, 8> others;
  if (read.size() >= others.size()) throw Error("check_outputs: more views than it holds");
  std::copy(read.begin(), read.end(), others.begin());
  others[read.size()] = out;
  check_written({memory_of(lse), "lse"}, {others.data(), read.size() + 1});
}

void check_no_shared_element(const StridedMemory& a, const char* a_name, const StridedMemory& b, const char* b_name) {
  const auto [a_first, a_last] = byte_span(a);
  const auto [b_first, b_last] = byte_span(b);
  if (!(a_first < b_last && b_first < a_last)) return;
  const std::ptrdiff_t gap = static_cast<const char*>(b.data) - static_cast<const char*>(a.data);
  const bool halves = same_layout(a, b) && gap % a.item == 0 && a.shape.size() < kMaxRank;
  if (halves) {
    std::array<std::int64_t, kMaxRank> shape{}, stride{};
    std::copy(a.shape.begin(), a.shape.end(), shape.begin());
    std::copy(a.stride.begin(), a.stride.end(), stride.begin());
    shape[a.shape.size()] = 2;
    stride[a.shape.size()] = gap / a.item;
    const std::size_t rank = a.shape.size() + 1;
    if (addresses_distinct({a.data, a.item, {shape.data(), rank}, {stride.data(), rank}})) return;
  }
  throw Error(text::format("{}: shares elements with {}; both are written, so one would overwrite the other "
                           "(give them their own memory, or the two halves of one buffer with the same "
                           "strides)", b_name, a_name));
}

}  // namespace pasa
