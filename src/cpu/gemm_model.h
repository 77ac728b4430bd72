// SPDX-License-Identifier: Apache-2.0
// The emulator's model of a matrix-engine GEMM: C = A B with the products formed exactly (true for
// operands of at most 12 significant bits: fp16, bf16, fp8; fp32 operands have their product rounded
// to fp32), accumulated in the accumulator format in the fixed order t = 0, 1, ..., k-1, and the sum
// rounded once to the output format. An accumulator narrower than fp32 is rounded after every product,
// or (step > 0) once per step of `step` products, summed with it as Hopper's tensor cores sum them
// (mma_step_sum). docs/numerics.md compares this with real matrix engines.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "numerics/rounder.h"

namespace pasa {

// The exponent of a finite nonzero x (x = m 2^e, 1 <= |m| < 2), or INT_MIN / 2 for zero, below every
// other; a non-finite x has none (0: mma_step_sum takes such operands apart).
inline int exponent_of(double x) { return x == 0.0 ? INT_MIN / 2 : std::isfinite(x) ? std::ilogb(x) : 0; }

// One step of a matrix engine into an accumulator holding c, before its rounding: c and the products
// a_t b_t (e_t: the sum of a_t's and b_t's exponents) each cut toward zero at 2^(e - 25), where e is the
// largest of c's exponent and the e_t, then added exactly. This is how Hopper's wgmma sums a k16 step
// into fp16 accumulators, which then round to nearest: measured bit for bit on an H200 over random
// and wide-ranged operands (tests/cuda/test_mma_step.cu keeps checking it). (Exact in a double: every
// term is a multiple of 2^(e - 25) below 2^(e + 2), and a product of fp32 operands has 48 bits.) An
// accumulator that overflowed stays inf (or NaN), as in IEEE arithmetic: the finite products add nothing;
// a non-finite operand makes the step's sum what IEEE arithmetic makes it (inf, or NaN).
inline double mma_step_sum(double c, const float* a, const int* ea, const float* b, std::int64_t ldb,
                           const int* eb, std::int64_t ldeb, int n) {
  bool finite = std::isfinite(c);
  for (int t = 0; t < n && finite; ++t) finite = std::isfinite(a[t]) && std::isfinite(b[t * ldb]);
  if (!finite) {
    for (int t = 0; t < n; ++t) c += static_cast<double>(a[t]) * b[t * ldb];
    return c;
  }
  int e = exponent_of(c);
  for (int t = 0; t < n; ++t) {
    if (a[t] != 0.0f && b[t * ldb] != 0.0f) e = std::max(e, ea[t] + eb[t * ldeb]);
  }
  if (e == INT_MIN / 2) return 0.0;  // c and every product 0
  const double q = std::ldexp(1.0, e - 25);
  double sum = std::trunc(c / q) * q;
  for (int t = 0; t < n; ++t) sum += std::trunc(static_cast<double>(a[t]) * b[t * ldb] / q) * q;
  return sum;
}

// A: rows x k (row stride lda), B: k x cols (row stride ldb), C: rows x cols (row stride ldc).
// step: the products an accumulator narrower than fp32 sums before each rounding (0: one; a wider
// accumulator adds product by product whatever the step).
// With accumulate = true the sums start from C's values (an MMA accumulating into its C operand);
// otherwise from zero.
inline void model_gemm(const float* A, std::int64_t lda, const float* B, std::int64_t ldb, int rows,
                       int k, int cols, const Rounder& acc, int step, const Rounder& out, double* C,
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
  if (step > 0 && acc.format().narrower_than_fp32()) {
    std::vector<int> ea(static_cast<std::size_t>(k)), eb(static_cast<std::size_t>(k) * cols);
    for (int t = 0; t < k; ++t)
      for (int c = 0; c < cols; ++c) eb[t * cols + c] = exponent_of(B[t * ldb + c]);
    for (int r = 0; r < rows; ++r) {
      const float* a = A + r * lda;
      for (int t = 0; t < k; ++t) ea[t] = exponent_of(a[t]);
      for (int c = 0; c < cols; ++c) {
        double sum = accumulate ? acc(C[r * ldc + c]) : 0.0;
        for (int t0 = 0; t0 < k; t0 += step) {
          const int n = std::min(step, k - t0);
          sum = acc(mma_step_sum(sum, a + t0, &ea[t0], B + t0 * ldb + c, ldb, &eb[t0 * cols + c], cols, n));
        }
        C[r * ldc + c] = out(sum);
      }
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
