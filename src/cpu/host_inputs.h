// SPDX-License-Identifier: Apache-2.0
// Q, K, V of one (batch, head) gathered from strided host views into contiguous rows, rounded to the
// policy's input format: what both CPU backends start from.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention_checks.h"
#include "interrupt.h"
#include "numerics/rounder.h"
#include "pasa/error.h"
#include "pasa/tensor.h"
#include "storage_convert.h"
#include "text/format.h"

namespace pasa {

// Rows [row0, row1) of t[b, h, :, :] as (row1 - row0) x dim values, each rounded by `round`.
template <typename T>
std::vector<T> gather_rows(const TensorView& t, std::int64_t b, std::int64_t h, std::int64_t row0,
                           std::int64_t row1, const Rounder& round) {
  // In chunks of rows, each zero-filled and written before the next, with Ctrl-C polled between
  // them: a head of millions of keys is one task of its loop and a gigabyte to fill.
  const std::int64_t dim = t.dim();
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>((row1 - row0) * dim));
  for (std::int64_t s0 = row0; s0 < row1; s0 += kRowsPerPoll) {
    poll_interrupt();
    const std::int64_t s1 = std::min(row1, s0 + kRowsPerPoll);
    out.resize(static_cast<std::size_t>((s1 - row0) * dim));
    for (std::int64_t s = s0; s < s1; ++s) {
      for (std::int64_t d = 0; d < dim; ++d) {
        out[(s - row0) * dim + d] = static_cast<T>(round(load_as_float(t.data, t.dtype, t.offset(b, h, s, d))));
      }
    }
  }
  return out;
}

// The error for a (finite) value x of the tensor `name` at `index` that overflows to inf when rounded
// to the policy's input format: a bf16 or fp32 value past fp16's 65504 under an fp16-input policy would
// turn its scores, and so its rows, into NaN (or, in the fp64 reference, into rows that look masked)
// while exact attention on the given values is finite.
inline Error input_overflow_error(const char* name, double x, const std::string& index, const Format& input) {
  return Error(text::format("{}: value {:g} at {} overflows {}, the policy's input format (largest finite value "
                            "{:g}); scale the inputs down or use a policy with a wider input format",
                            name, x, index, input.name(), input.max_finite()));
}

// Throws input_overflow_error for the first index of t whose value overflows the input format (`where`
// says how the index is named). The scan is skipped where the tensor's dtype cannot hold such a value.
inline void check_fits_input(const TensorView& t, const char* name, const Rounder& round,
                             const ElementIndex& where = {}) {
  const double dtype_max = t.dtype == DType::f16 ? 65504.0 : 3.4028234663852886e38;
  if (round.format().is_integer() || round.format().max_finite() >= dtype_max) return;
  InterruptPoll interrupt;  // (a scan of every element, before the call's parallel loops)
  for (std::int64_t b = 0; b < t.shape[0]; ++b)
    for (std::int64_t h = 0; h < t.shape[1]; ++h)
      for (std::int64_t s = 0; s < t.shape[2]; ++s) {
        if (s % kRowsPerPoll == 0) interrupt.poll();
        for (std::int64_t d = 0; d < t.shape[3]; ++d) {
          const double x = load_as_float(t.data, t.dtype, t.offset(b, h, s, d));
          if (std::isfinite(round(x))) continue;
          throw input_overflow_error(name, x, where.at(b, h, s, d), round.format());
        }
      }
}

// All rows of t[b, h, :, :].
template <typename T>
std::vector<T> gather_head(const TensorView& t, std::int64_t b, std::int64_t h, const Rounder& round) {
  return gather_rows<T>(t, b, h, 0, t.seq(), round);
}

}  // namespace pasa
