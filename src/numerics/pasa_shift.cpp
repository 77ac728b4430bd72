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
  // Where M would be sound at a unit scale, the scale folded in is the cause (too small: 0 among them),
  // not beta or s2.
  const PasaShift unit = pasa_shift(beta, n, 1.0, format);
  if (factor != 1.0 && unit.diag + (n - 1) * unit.off > 0.0) {
    throw Error(text::format("scale: folded into the shifting matrix M (the policy's scale=k) as {:g} (in score "
                             "units: times log2 e with exp_base=2), it is too small for {}: M's rows sum to {:g}; "
                             "at least {:g} in those units keeps the sum a normal {} number at beta {}, or apply "
                             "the scale elsewhere (scale=q or scale=s)",
                             factor, format.name(), row_sum, format.min_normal() / (1.0 - beta), format.name(), beta));
  }
  const std::string folded = factor == 1.0 ? "" : text::format(" with the scale {:g} folded in", factor);
  throw Error(text::format("beta: {} with s2 = {}: the shifting matrix M rounded to {}{} has rows summing to {:g} "
                           "({}); PASA needs rows summing to a multiple of the scale between 0 and 1: use a "
                           "smaller beta or a larger s2", beta, n, format.name(), folded, row_sum,
                           row_sum == 0.0 ? "M is singular, G infinite" : "M applies a beta above 1"));
}

}  // namespace pasa
