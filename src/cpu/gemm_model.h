// SPDX-License-Identifier: Apache-2.0
// The emulator's model of a matrix-engine GEMM: C = A B with the products formed exactly (true for
// operands of at most 12 significant bits: fp16, bf16, fp8; fp32 operands have their product rounded
// to fp32), accumulated in the accumulator format in the fixed order t = 0, 1, ..., k-1, and the sum
// rounded once to the output format. docs/numerics.md compares this with real matrix engines.
#pragma once

#include <cstdint>
#include <vector>

#include "numerics/rounder.h"

namespace pasa {

// A: rows x k (row stride lda), B: k x cols (row stride ldb), C: rows x cols (row stride ldc).
// With accumulate = true the sums start from C's values (an MMA accumulating into its C operand);
// otherwise from zero.
inline void model_gemm(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, int rows,
                       int k, int cols, const Rounder& acc, const Rounder& out, double* C,
                       std::int64_t ldc, bool accumulate = false) {
  if (acc.is_fp32()) {
    // fp32 accumulation is the hardware's own float addition; the loop over c vectorizes while each
    // C[r, c] still sums its k products in order.
    std::vector<float> sum(static_cast<std::size_t>(cols));
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) sum[c] = accumulate ? static_cast<float>(C[r * ldc + c]) : 0.0f;
      for (int t = 0; t < k; ++t) {
        const float a = A[r * lda + t];
        const float* b = B + t * ldb;
        for (int c = 0; c < cols; ++c) sum[c] = sum[c] + a * b[c];
      }
      for (int c = 0; c < cols; ++c) C[r * ldc + c] = out(sum[c]);
    }
    return;
  }
  std::vector<double> sum(static_cast<std::size_t>(cols));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) sum[c] = accumulate ? acc(C[r * ldc + c]) : 0.0;
    for (int t = 0; t < k; ++t) {
      const double a = A[r * lda + t];
      const float* b = B + t * ldb;
      for (int c = 0; c < cols; ++c) sum[c] = acc(sum[c] + a * static_cast<double>(b[c]));
    }
    for (int c = 0; c < cols; ++c) C[r * ldc + c] = out(sum[c]);
  }
}

}  // namespace pasa
