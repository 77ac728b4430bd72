// SPDX-License-Identifier: Apache-2.0
// pasa/beta.h — PASA's optimal beta (the paper's Appendix A-C, algorithms.md section 3).
//
// Rounding the shifting matrix M to the low-precision format changes the shift M really applies.
// With n = s2, b = fl(beta/n) and a = fl(1 - beta/n) + b, the practical invariance is
//   f(beta) = b n / (a (a - b n)) + (1 - a) / a,
// and beta is optimal when beta / (1 - beta) = f(beta): the algorithm's recovery term g = beta/(1-beta)
// then equals what the rounded M actually subtracted. Solved by fixed-point iteration in fp64.
#pragma once

#include <optional>

#include "pasa/format.h"

namespace pasa {

struct BetaSolution {
  double initial;           // the starting beta
  double beta;              // the fixed point
  double invariance;        // beta / (1 - beta) in fp64
  double invariance_rounded;// the recovery factor g as stored in the format
  int iterations;
};

// `scale`, when given, is the softmax scale folded into M (the pasa preset's scale=k): the entries
// are then fl((1 - beta/n) alpha) and fl(-(beta/n) alpha), and a, b are those divided by alpha. Without
// it, alpha stays out of M (scale=s), which is what the paper's Table 3 assumes.
// Throws pasa::Error for initial values outside (0, 1), n < 1, or a format that is not a float format
// parse_format could return (check_format).
BetaSolution solve_beta(double initial, const Format& format = Format::fp16(), int block = 128,
                        std::optional<double> scale = std::nullopt);

}  // namespace pasa
