// SPDX-License-Identifier: Apache-2.0
// A Format compiled for speed: the emulator rounds several times per score, so the common cases
// (fp32 by a cast, floating formats by integer arithmetic on the double's bits) avoid the general
// frexp/ldexp path of round_to(). Results are identical to round_to(); the format tests check it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pasa/format.h"

namespace pasa {

class Rounder {
 public:
  explicit Rounder(const Format& f)
      : format_(f),
        identity_(!f.is_integer() && f.exp_bits == 11 && f.man_bits == 52),
        fp32_(f == Format::fp32()),
        // The bit path rounds away at least one of the double's 52 fraction bits; a format that keeps
        // all of them (e8m52) differs from a double only in range, which round_to handles.
        bit_path_(!f.is_integer() && f.man_bits < 52),
        drop_bits_(52 - f.man_bits),
        // Only the bit path reads the exponent: an integer format has none (its bias() would shift by -1).
        min_exponent_(bit_path_ ? f.min_exponent() : 0),
        max_finite_(f.max_finite()),
        // Adding this to a value below the smallest normal leaves exactly the subnormal quantum
        // 2^(min_exponent - man_bits) as the double's ulp, so the addition itself rounds (to even).
        subnormal_magic_(bit_path_ ? std::ldexp(1.0, f.min_exponent() - f.man_bits + 52) : 0.0) {}

  const Format& format() const { return format_; }
  bool is_fp32() const { return fp32_; }

  double operator()(double x) const {
    if (identity_) return x;
    if (fp32_) return static_cast<double>(static_cast<float>(x));
    if (!bit_path_) return round_to(format_, x);
    std::uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
    if (exponent == 1024) return round_to(format_, x);  // inf or NaN: the format decides
    double r;
    if (exponent >= min_exponent_) {
      // Round to nearest even on the fraction bits; a carry moves into the exponent correctly.
      const std::uint64_t half_minus_one = (std::uint64_t{1} << (drop_bits_ - 1)) - 1;
      bits += half_minus_one + ((bits >> drop_bits_) & 1u);
      bits &= ~((std::uint64_t{1} << drop_bits_) - 1);
      std::memcpy(&r, &bits, sizeof r);
    } else {
      const double magic = std::copysign(subnormal_magic_, x);
      r = (x + magic) - magic;  // two real roundings: the build never enables -ffast-math
    }
    if (std::fabs(r) > max_finite_) return round_to(format_, x);  // overflow rule of the format
    return r;
  }

 private:
  Format format_;
  bool identity_, fp32_, bit_path_;
  int drop_bits_, min_exponent_;
  double max_finite_, subnormal_magic_;
};

}  // namespace pasa
