// SPDX-License-Identifier: Apache-2.0
// pasa/format.h — number formats at the rounding points of a precision policy.
//
// A format is data: a binary float eXmY (exponent and mantissa bits, what happens on overflow) or a
// symmetric integer grid. Every value of every format is exactly representable in a double, so the
// emulator carries values as doubles and calls round_to() at each rounding point.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pasa {

// What rounding does with a value beyond the largest finite number.
enum class Overflow {
  to_inf,    // IEEE behaviour: fp16, bf16, fp32, e5m2, any eXmY
  to_nan,    // fp8 e4m3 "fn" without saturation (CUDA's __NV_NOSAT): no inf exists
  saturate,  // clamp to +-max finite (CUDA's __NV_SATFINITE; what quantizers use)
};

struct Format {
  enum class Kind { floating, integer };
  Kind kind = Kind::floating;
  int exp_bits = 8;    // floating only
  int man_bits = 23;   // floating only: explicit fraction bits
  bool fn = false;     // e4m3 "fn": no inf, only the all-ones pattern is NaN (max 448)
  Overflow overflow = Overflow::to_inf;
  int int_bits = 0;    // integer only: 8 or 4 (symmetric range [-(2^(n-1)-1), 2^(n-1)-1])

  static Format fp32() { return {Kind::floating, 8, 23, false, Overflow::to_inf, 0}; }
  static Format fp16() { return {Kind::floating, 5, 10, false, Overflow::to_inf, 0}; }
  static Format bf16() { return {Kind::floating, 8, 7, false, Overflow::to_inf, 0}; }
  static Format e4m3() { return {Kind::floating, 4, 3, true, Overflow::to_nan, 0}; }
  static Format e5m2() { return {Kind::floating, 5, 2, false, Overflow::to_inf, 0}; }
  static Format fp22() { return {Kind::floating, 8, 13, false, Overflow::to_inf, 0}; }
  static Format int8() { return {Kind::integer, 0, 0, false, Overflow::saturate, 8}; }
  static Format int4() { return {Kind::integer, 0, 0, false, Overflow::saturate, 4}; }
  static Format floating(int exp_bits, int man_bits) {
    return {Kind::floating, exp_bits, man_bits, false, Overflow::to_inf, 0};
  }

  bool is_integer() const { return kind == Kind::integer; }
  // A floating format of fewer significant bits than fp32's 24 (what a GEMM's mma_k steps model).
  bool narrower_than_fp32() const { return !is_integer() && man_bits < 23; }
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int min_exponent() const { return 1 - bias(); }  // exponent of the smallest normal
  int max_exponent() const;                        // exponent of the largest finite value
  double max_finite() const;                       // 65504 for fp16, 448 for e4m3, 127 for int8
  double min_normal() const;                       // 0 for integers
  double epsilon() const;                          // 2^-man_bits (1 for integers)

  // Canonical text: "fp32", "fp16", "bf16", "e4m3", "e5m2", "fp22" (e8m13), "int8", "int4", else "eXmY", with
  // "e4m3ieee" for the IEEE-style e4m3 with inf, and ":sat" / ":nan" / ":inf" appended where the overflow rule is not the format's default.
  std::string name() const;
  bool operator==(const Format& o) const;
  bool operator!=(const Format& o) const { return !(*this == o); }
};

// Parses the names above plus aliases ("fp8_e4m3", "e4m3fn", "e8m13" = fp22, "fp64"); throws
// pasa::Error naming the text when it is not a format.
Format parse_format(std::string_view text);

// Throws pasa::Error, starting with `what`, unless `format` is one parse_format can return: a float
// of 2..11 exponent and 0..52 fraction bits (fn only for e4m3, whose overflow is then nan or sat) or
// int8/int4 (saturating), with an Overflow and Kind among the enumerators. A Format built field by
// field outside these has no text form, and rounding to it is undefined.
void check_format(const Format& format, const std::string& what);

// x rounded to the format, round-to-nearest-even, subnormals kept, overflow per format.overflow.
// NaN stays NaN; inf maps to inf (or NaN / max for formats without inf). Integers round to the
// nearest integer (ties to even) and saturate.
double round_to(const Format& format, double x);

// x rounded toward +inf to a floating format: the least value of the format at or above x (then
// overflow per format.overflow). NaN stays NaN. For integer formats, as round_to.
double round_up_to(const Format& format, double x);

// The format with overflow saturating at +-its largest finite value (the text form's ":sat").
Format saturating(Format format);

// Bit patterns (formats of at most 32 bits): encode rounds x first. Used for file I/O and tests.
std::uint32_t encode_bits(const Format& format, double x);
double decode_bits(const Format& format, std::uint32_t bits);
int bit_width(const Format& format);

}  // namespace pasa
