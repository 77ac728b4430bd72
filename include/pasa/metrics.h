// SPDX-License-Identifier: Apache-2.0
// pasa/metrics.h — accuracy of an output against a reference (algorithms.md sections 3 and 4).
#pragma once

#include <vector>

namespace pasa {

struct ErrorMetrics {
  double rel_rmse;   // ||O - O'||_2 / ||O'||_2 (PASA's Eq. 19)
  double cos_sim;    // sum(O O') / sqrt(sum O^2 sum O'^2) (SageAttention2)
  double rel_l1;     // sum|O - O'| / sum|O'|
  double rmse;       // sqrt(mean((O - O')^2))
  double max_abs;    // max |O - O'|
  double nan_share;  // share of elements of O that are not finite, 0..1
};

// Compares `got` with `ref` (same length). When some element of `got` is not finite, every error
// metric is NaN and nan_share says how many; an all-zero reference gives absolute errors. A reference
// holding NaN or inf is a pasa::Error naming the first such index: there is no error to measure.
ErrorMetrics compare(const std::vector<double>& got, const std::vector<double>& ref);

}  // namespace pasa
