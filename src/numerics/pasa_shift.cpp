// SPDX-License-Identifier: Apache-2.0
#include "numerics/pasa_shift.h"

#include <string>

#include "pasa/error.h"
#include "text/format.h"

namespace pasa {

PasaShift pasa_shift(double beta, int n, double factor, const Format& format) {
  PasaShift s{};
  s.diag = round_to(format, (1.0 - beta / n) * factor);
  s.off = round_to(format, -(beta / n) * factor);
  const double row_sum = s.diag + (n - 1) * s.off;
  s.invariance = factor / row_sum - 1.0;
  return s;
}

PasaShift check_pasa_shift(double beta, int n, double factor, const Format& format) {
  const PasaShift s = pasa_shift(beta, n, factor, format);
  const double row_sum = s.diag + (n - 1) * s.off;
  if (row_sum / factor > 0.0) return s;  // r has the sign of the factor (a negative scale flips both)
  const std::string folded = factor == 1.0 ? "" : text::format(" with the scale {:g} folded in", factor);
  throw Error(text::format("beta: {} with s2 = {}: the shifting matrix M rounded to {}{} has rows summing to {:g} "
                           "({}); PASA needs rows summing to a multiple of the scale between 0 and 1: use a "
                           "smaller beta or a larger s2", beta, n, format.name(), folded, row_sum,
                           row_sum == 0.0 ? "M is singular, G infinite" : "M applies a beta above 1"));
}

}  // namespace pasa
