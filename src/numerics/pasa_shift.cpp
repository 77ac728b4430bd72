// SPDX-License-Identifier: Apache-2.0
#include "numerics/pasa_shift.h"

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

void check_pasa_shift(double beta, int n, double factor, const Format& format) {
  const PasaShift s = pasa_shift(beta, n, factor, format);
  const double row_sum = s.diag + (n - 1) * s.off;
  if (row_sum > 0.0) return;
  throw Error(text::format("beta: {} with s2 = {}: the shifting matrix M rounded to {} has rows summing to {:g} "
                           "({}); PASA needs a positive row sum: use a smaller beta or a larger s2",
                           beta, n, format.name(), row_sum,
                           row_sum == 0.0 ? "M is singular, G infinite" : "M applies a beta above 1"));
}

}  // namespace pasa
