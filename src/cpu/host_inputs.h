// SPDX-License-Identifier: Apache-2.0
// Q, K, V of one (batch, head) gathered from strided host views into contiguous rows, rounded to the
// policy's input format: what both CPU backends start from.
#pragma once

#include <cstdint>
#include <vector>

#include "numerics/rounder.h"
#include "pasa/tensor.h"
#include "storage_convert.h"

namespace pasa {

// Rows [row0, row1) of t[b, h, :, :] as (row1 - row0) x dim values, each rounded by `round`.
template <typename T>
std::vector<T> gather_rows(const TensorView& t, std::int64_t b, std::int64_t h, std::int64_t row0,
                           std::int64_t row1, const Rounder& round) {
  const std::int64_t dim = t.dim();
  std::vector<T> out(static_cast<std::size_t>((row1 - row0) * dim));
  for (std::int64_t s = row0; s < row1; ++s) {
    for (std::int64_t d = 0; d < dim; ++d) {
      out[(s - row0) * dim + d] =
          static_cast<T>(round(load_as_float(t.data, t.dtype, t.offset(b, h, s, d))));
    }
  }
  return out;
}

// All rows of t[b, h, :, :].
template <typename T>
std::vector<T> gather_head(const TensorView& t, std::int64_t b, std::int64_t h, const Rounder& round) {
  return gather_rows<T>(t, b, h, 0, t.seq(), round);
}

}  // namespace pasa
