// SPDX-License-Identifier: Apache-2.0
#include "numerics/pasa_shift.h"

namespace pasa {

PasaShift pasa_shift(double beta, int n, double factor, const Format& format) {
  PasaShift s{};
  s.diag = round_to(format, (1.0 - beta / n) * factor);
  s.off = round_to(format, -(beta / n) * factor);
  const double row_sum = s.diag + (n - 1) * s.off;
  s.invariance = factor / row_sum - 1.0;
  return s;
}

}  // namespace pasa
