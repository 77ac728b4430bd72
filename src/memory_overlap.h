// SPDX-License-Identifier: Apache-2.0
// Where a strided view's elements lie in memory, to refuse an output whose elements would be written
// twice (a stride of 0, or dimensions whose strides interleave) or that shares memory with a tensor the
// call reads: either loses results silently. Shared by the C++ entry points and the Python bindings.
#pragma once

#include <cstdint>
#include <span>

#include "pasa/attention.h"

namespace pasa {

// A strided array: the address of its element at index 0, bytes per element, sizes and element strides.
struct StridedMemory {
  const void* data = nullptr;
  std::int64_t item = 0;
  std::span<const std::int64_t> shape, stride;
};

StridedMemory memory_of(const TensorView& t);
StridedMemory memory_of(const LseView& t);
StridedMemory memory_of(const MaskView& t);
// A contiguous int32 array of `count` elements (cu_seqlens, cache_seqlens, a block table). `count` is
// the view's shape, so it must outlive the view.
StridedMemory memory_of(const std::int32_t* data, const std::int64_t& count);
StridedMemory memory_of(const std::int32_t* data, const std::int64_t&& count) = delete;  // (it would dangle)

// pasa::Error naming `name` unless every index of `out` addresses its own element. Decided by a rule
// that is sufficient, not necessary (deciding it exactly is a subset-sum problem): the dimensions of
// size > 1, ordered by |stride|, each step past all that the smaller ones span (|stride| > sum of
// (size - 1) |stride| over them). Every permutation of a contiguous array, and every slice of one,
// passes.
void check_no_self_overlap(const StridedMemory& out, const char* name);

// Raises pasa::Error naming `name` where a view's elements span more than 2^63 bytes, or lie outside
// the address space: the offsets the kernels and the emulator compute in 64 bits would overflow.
void check_reach(const StridedMemory& m, const char* name);

// pasa::Error naming both unless the byte ranges `out` and `other` span (first to last byte of their
// extreme elements) are disjoint. Conservative: two views that interleave without sharing an element
// (k and v as halves of one [.., 2, ..] buffer) are refused as well when one of them is written.
void check_apart(const StridedMemory& out, const char* name, const StridedMemory& other, const char* other_name);

// Whether two views lay their elements out alike (element size, sizes and strides), wherever they start.
bool same_layout(const StridedMemory& a, const StridedMemory& b);

// A view and the name errors give it.
struct NamedMemory {
  StridedMemory memory;
  const char* name;
};

// An output: check_no_self_overlap, then check_apart from each of `others` (what the call reads, and
// the other outputs).
void check_written(const NamedMemory& out, std::span<const NamedMemory> others);
// check_written's second half alone, for an output whose own elements are already checked.
void check_apart_from(const NamedMemory& out, std::span<const NamedMemory> others);

// A call's outputs o and (where lse.data is set) lse, each check_written against `read` (at most 7
// views), the LSE against o too.
void check_outputs(const TensorView& o, const LseView& lse, std::span<const NamedMemory> read);
// check_outputs against more views the call reads, for outputs check_outputs has already seen (their own
// elements, and lse against o): o and lse each check_apart from `read` only.
void check_outputs_apart(const TensorView& o, const LseView& lse, std::span<const NamedMemory> read);

// pasa::Error naming both unless `a` and `b`, both written, share no element: apart (check_apart), or
// the two halves of one buffer, with the same strides and a gap between them that the stride rule
// (check_no_self_overlap) lets a dimension of size 2 take (k_cache and v_cache in one
// [blocks, 2, block_size, H, D] pool). Any other overlap is refused.
void check_no_shared_element(const StridedMemory& a, const char* a_name, const StridedMemory& b, const char* b_name);

}  // namespace pasa
