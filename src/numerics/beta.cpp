// SPDX-License-Identifier: Apache-2.0
#include "pasa/beta.h"

#include <cmath>
#include <string>

#include "numerics/pasa_shift.h"
#include "pasa/error.h"
#include "text/format.h"

namespace pasa {

BetaSolution solve_beta(double initial, const Format& format, int block, std::optional<double> scale) {
  if (!(initial > 0.0 && initial < 1.0)) {
    throw Error(text::format("beta: initial value {} is outside (0, 1)", initial));
  }
  if (block < 1) throw Error(text::format("beta: block size {} must be at least 1", block));
  check_format(format, "beta: format");
  if (format.is_integer()) throw Error("beta: format " + format.name() + " is not a float format");
  if (scale && !(std::isfinite(*scale) && *scale > 0.0)) {
    throw Error(text::format("beta: scale {} must be positive and finite", *scale));
  }
  // The practical invariance of the rounded M, as a function of the beta it was built from (the
  // paper's f(beta) = b n / (a (a - b n)) + (1 - a) / a, written through M's row sum).
  auto invariance_of = [&](double beta) { return pasa_shift(beta, block, scale.value_or(1.0), format).invariance; };
  BetaSolution s{initial, initial, 0.0, 0.0, 0};
  for (; s.iterations < 1000; ++s.iterations) {
    const double f = invariance_of(s.beta);
    const double next = f / (1.0 + f);
    if (!(next >= 0.0 && next < 1.0)) {
      // next is the beta that M, built from s.beta and rounded, applies (1 where M is singular): the
      // format cannot hold s.beta's M at this block size (and scale), so the iteration cannot go on.
      const double applied = 1.0 - 1.0 / (1.0 + f);
      if (std::isnan(applied)) {  // (M's entries not finite: a scale past what the format holds in M)
        throw Error(text::format("beta: M built from beta = {:g}{} has entries that are not finite in {}; "
                                 "iterating from {:g}",
                                 s.beta, scale ? text::format(" and scale {:g}", *scale) : std::string(),
                                 format.name(), initial));
      }
      throw Error(text::format("beta: M built from beta = {:g} and rounded to {} applies beta = {:g}, outside [0, 1) "
                               "({} cannot hold this M at s2 = {}{}; iterating from {:g})",
                               s.beta, format.name(), applied, format.name(), block,
                               scale ? text::format(", scale {:g}", *scale) : std::string(), initial));
    }
    if (next == s.beta) break;
    s.beta = next;
  }
  s.invariance = s.beta / (1.0 - s.beta);
  s.invariance_rounded = round_to(format, s.invariance);
  return s;
}

}  // namespace pasa
