// SPDX-License-Identifier: Apache-2.0
// Number formats: rounding (round-to-nearest-even with subnormals and per-format overflow) and bit
// patterns. Values are carried as doubles: every format here (at most 11 exponent and 52 fraction bits)
// is a subset of double, so rounding a double once is the single correctly rounded conversion.
#include "pasa/format.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include "pasa/error.h"

namespace pasa {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_double(const Format& f) { return !f.is_integer() && f.exp_bits == 11 && f.man_bits == 52; }

double overflowed(const Format& f, double x) {
  switch (f.overflow) {
    case Overflow::to_inf: return std::copysign(kInf, x);
    case Overflow::to_nan: return kNaN;
    case Overflow::saturate: return std::copysign(f.max_finite(), x);
  }
  return kNaN;
}

Overflow default_overflow(const Format& f) {
  if (f.is_integer()) return Overflow::saturate;
  return f.fn ? Overflow::to_nan : Overflow::to_inf;
}

// A bit count in eXmY: decimal digits only (std::stoi would also take "+5" or " 5").
bool parse_bits(std::string_view digits, int& out) {
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, out);
  return !digits.empty() && digits[0] != '-' && ec == std::errc() && ptr == end;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

int Format::max_exponent() const {
  // IEEE formats reserve the top exponent for inf/NaN; e4m3 "fn" uses it for normals too.
  return fn ? bias() + 1 : bias();
}

double Format::max_finite() const {
  if (is_integer()) return std::ldexp(1.0, int_bits - 1) - 1.0;
  if (is_double(*this)) return std::numeric_limits<double>::max();
  // fn formats lose the all-ones fraction at the top exponent (it is NaN).
  const int top_fraction_ulps = fn ? 2 : 1;
  return std::ldexp(2.0 - top_fraction_ulps * std::ldexp(1.0, -man_bits), max_exponent());
}

double Format::min_normal() const { return is_integer() ? 0.0 : std::ldexp(1.0, min_exponent()); }

double Format::epsilon() const { return is_integer() ? 1.0 : std::ldexp(1.0, -man_bits); }

bool Format::operator==(const Format& o) const {
  return kind == o.kind && exp_bits == o.exp_bits && man_bits == o.man_bits && fn == o.fn &&
         overflow == o.overflow && int_bits == o.int_bits;
}

std::string Format::name() const {
  std::string base;
  if (is_integer()) {
    base = "int" + std::to_string(int_bits);
  } else if (exp_bits == 8 && man_bits == 23) {
    base = "fp32";
  } else if (exp_bits == 5 && man_bits == 10) {
    base = "fp16";
  } else if (exp_bits == 8 && man_bits == 7) {
    base = "bf16";
  } else if (exp_bits == 4 && man_bits == 3 && fn) {
    base = "e4m3";
  } else if (exp_bits == 4 && man_bits == 3) {
    base = "e4m3ieee";  // the IEEE-style e4m3 with inf (max 240): not the fn format "e4m3" names
  } else if (exp_bits == 5 && man_bits == 2) {
    base = "e5m2";
  } else if (exp_bits == 8 && man_bits == 13 && !fn) {
    base = "fp22";  // the FP8 MMA's accumulator (SageAttention2), spelled as the docs and papers do
  } else if (is_double(*this)) {
    base = "fp64";
  } else {
    // Appended piecewise: "e" + std::to_string(...) trips GCC 12's false -Wrestrict warning.
    base = 'e';
    base += std::to_string(exp_bits) + 'm' + std::to_string(man_bits);
  }
  if (overflow != default_overflow(*this)) {
    base += overflow == Overflow::saturate ? ":sat" : overflow == Overflow::to_nan ? ":nan" : ":inf";
  }
  return base;
}

Format parse_format(std::string_view text) {
  std::string s = lower(text);
  std::string suffix;
  const std::size_t colon = s.find(':');
  if (colon != std::string::npos) {
    suffix = s.substr(colon + 1);
    s = s.substr(0, colon);
  }
  Format f;
  if (s == "fp32" || s == "f32" || s == "float32") {
    f = Format::fp32();
  } else if (s == "fp16" || s == "f16" || s == "half" || s == "float16") {
    f = Format::fp16();
  } else if (s == "bf16" || s == "bfloat16") {
    f = Format::bf16();
  } else if (s == "e4m3" || s == "e4m3fn" || s == "fp8_e4m3" || s == "fp8e4m3") {
    f = Format::e4m3();
  } else if (s == "e4m3ieee") {
    f = Format::floating(4, 3);
  } else if (s == "e5m2" || s == "fp8_e5m2" || s == "fp8e5m2") {
    f = Format::e5m2();
  } else if (s == "fp22") {
    f = Format::fp22();
  } else if (s == "fp64" || s == "f64" || s == "float64") {
    f = Format::floating(11, 52);
  } else if (s == "int8") {
    f = Format::int8();
  } else if (s == "int4") {
    f = Format::int4();
  } else {
    int e = -1, m = -1;
    std::size_t pos_m = s.find('m');
    const std::string_view sv = s;
    const bool ok = s.size() >= 4 && s[0] == 'e' && pos_m != std::string::npos && pos_m > 1 &&
                    parse_bits(sv.substr(1, pos_m - 1), e) && parse_bits(sv.substr(pos_m + 1), m);
    if (!ok) {
      throw Error("unknown number format '" + std::string(text) +
                  "' (expected fp32, fp16, bf16, e4m3, e5m2, fp22, fp64, int8, int4 or eXmY)");
    }
    if (e < 2 || e > 11 || m < 0 || m > 52) {
      throw Error("number format '" + std::string(text) +
                  "': exponent bits must be 2..11 and mantissa bits 0..52");
    }
    f = Format::floating(e, m);
  }
  if (colon != std::string::npos) {  // "e5m2:" names no rule: an error, not the default
    if (suffix == "sat") {
      f.overflow = Overflow::saturate;
    } else if (suffix == "nan" && !f.is_integer()) {
      f.overflow = Overflow::to_nan;
    } else if (suffix == "inf" && !f.is_integer() && !f.fn) {
      f.overflow = Overflow::to_inf;
    } else {
      const bool known = suffix == "sat" || suffix == "nan" || suffix == "inf";
      throw Error("number format '" + std::string(text) + "': overflow rule '" + suffix + "' " +
                  (!known ? std::string("is not one of sat, nan, inf")
                   : f.is_integer() ? std::string("is not an integer format's: integers saturate (sat)")
                                    : std::string("needs a format that has inf")));
    }
  }
  return f;
}

void check_format(const Format& f, const std::string& what) {
  const auto fail = [&](const std::string& why) { throw Error(what + ": " + why); };
  const int overflow = static_cast<int>(f.overflow);
  if (overflow < 0 || overflow > static_cast<int>(Overflow::saturate)) {
    fail("overflow rule (code " + std::to_string(overflow) + ") is not to_inf, to_nan or saturate");
  }
  if (f.kind == Format::Kind::integer) {
    if (f.int_bits != 8 && f.int_bits != 4) {
      fail("integer format of " + std::to_string(f.int_bits) + " bits (int8 and int4 exist)");
    }
    if (f.overflow != Overflow::saturate || f.fn) fail("an integer format saturates and has no fn flag");
    // (fields its text cannot spell: a format that printed alike would compare unequal)
    if (f.exp_bits != 0 || f.man_bits != 0) fail("an integer format has no exponent or mantissa bits");
    return;
  }
  if (f.kind != Format::Kind::floating) {
    fail("format kind (code " + std::to_string(static_cast<int>(f.kind)) + ") is not floating or integer");
  }
  if (f.exp_bits < 2 || f.exp_bits > 11 || f.man_bits < 0 || f.man_bits > 52) {
    fail("e" + std::to_string(f.exp_bits) + "m" + std::to_string(f.man_bits) +
         ": exponent bits must be 2..11 and mantissa bits 0..52");
  }
  if (f.fn && (f.exp_bits != 4 || f.man_bits != 3)) fail("only e4m3 has an fn (no infinity) variant");
  if (f.fn && f.overflow == Overflow::to_inf) fail("e4m3 (fn) has no infinity to overflow to");
  if (f.int_bits != 0) fail("a floating format has no integer bits (int_bits " + std::to_string(f.int_bits) + ")");
}

double round_to(const Format& f, double x) {
  if (std::isnan(x)) return x;
  if (f.is_integer()) {
    if (std::isinf(x)) return overflowed(f, x);
    const double r = std::nearbyint(x);  // the default rounding mode: ties to even
    return std::fabs(r) > f.max_finite() ? overflowed(f, r) : r;
  }
  // inf before the fp64 shortcut: "fp64:sat" clamps inf to the largest double like any other format.
  if (std::isinf(x)) return f.overflow == Overflow::to_inf ? x : overflowed(f, x);
  if (is_double(f)) return x;
  if (x == 0.0) return x;
  int e2 = 0;
  std::frexp(x, &e2);  // |x| = frac * 2^e2, frac in [0.5, 1): x's binary exponent is e2 - 1
  const int exponent = std::max(e2 - 1, f.min_exponent());  // below min_exponent: subnormal grid
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, f.man_bits - exponent)),
                              exponent - f.man_bits);
  return std::fabs(r) > f.max_finite() ? overflowed(f, r) : r;
}

double round_up_to(const Format& f, double x) {
  const double r = round_to(f, x);
  // A finite x below -max overflowed to -inf (or NaN in a format without inf): up from it is -max.
  if (!f.is_integer() && std::isfinite(x) && x < 0.0 && !std::isfinite(r)) return -f.max_finite();
  if (f.is_integer() || !(r < x)) return r;  // (NaN, and a value that rounded up already or is exact)
  // Rounded down to nearest: x lies in the binade of r (or, for a negative power of two r, in the
  // one below it), so the next value up is r plus the spacing of x's binade, exactly representable.
  int e2 = 0;
  std::frexp(x, &e2);
  const int exponent = std::max(e2 - 1, f.min_exponent());
  return round_to(f, r + std::ldexp(1.0, exponent - f.man_bits));
}

Format saturating(Format f) {
  f.overflow = Overflow::saturate;
  return f;
}

int bit_width(const Format& f) { return f.is_integer() ? f.int_bits : 1 + f.exp_bits + f.man_bits; }

std::uint32_t encode_bits(const Format& f, double x) {
  if (bit_width(f) > 32) throw Error("encode_bits: format " + f.name() + " is wider than 32 bits");
  const double r = round_to(f, x);
  if (f.is_integer()) {
    if (std::isnan(r)) return 0;
    const auto v = static_cast<std::int64_t>(r);
    return static_cast<std::uint32_t>(v) & ((1u << f.int_bits) - 1u);
  }
  const std::uint32_t sign = std::signbit(r) ? 1u << (f.exp_bits + f.man_bits) : 0u;
  const std::uint32_t exp_all_ones = (1u << f.exp_bits) - 1u;
  const std::uint32_t man_all_ones = (1u << f.man_bits) - 1u;
  if (std::isnan(r)) return (exp_all_ones << f.man_bits) | man_all_ones;  // canonical positive NaN
  if (std::isinf(r)) return sign | (exp_all_ones << f.man_bits);
  if (r == 0.0) return sign;
  int e2 = 0;
  std::frexp(r, &e2);
  const int exponent = e2 - 1;
  const double a = std::fabs(r);
  if (exponent < f.min_exponent()) {  // subnormal: fraction counts units of 2^(emin - man_bits)
    return sign | static_cast<std::uint32_t>(std::ldexp(a, f.man_bits - f.min_exponent()));
  }
  const auto fraction =
      static_cast<std::uint32_t>(std::ldexp(a, f.man_bits - exponent)) & man_all_ones;
  return sign | (static_cast<std::uint32_t>(exponent + f.bias()) << f.man_bits) | fraction;
}

double decode_bits(const Format& f, std::uint32_t bits) {
  if (bit_width(f) > 32) throw Error("decode_bits: format " + f.name() + " is wider than 32 bits");
  if (f.is_integer()) {
    const std::int32_t shift = 32 - f.int_bits;  // sign-extend the low int_bits bits
    return static_cast<double>(static_cast<std::int32_t>(bits << shift) >> shift);
  }
  const std::uint32_t man_all_ones = (1u << f.man_bits) - 1u;
  const std::uint32_t exp_all_ones = (1u << f.exp_bits) - 1u;
  const bool negative = (bits >> (f.exp_bits + f.man_bits)) & 1u;
  const std::uint32_t exp_field = (bits >> f.man_bits) & exp_all_ones;
  const std::uint32_t fraction = bits & man_all_ones;
  double value;
  if (f.fn && exp_field == exp_all_ones && fraction == man_all_ones) {
    value = kNaN;
  } else if (!f.fn && exp_field == exp_all_ones) {
    value = fraction == 0 ? kInf : kNaN;
  } else if (exp_field == 0) {
    value = std::ldexp(static_cast<double>(fraction), f.min_exponent() - f.man_bits);
  } else {
    value = std::ldexp(1.0 + std::ldexp(static_cast<double>(fraction), -f.man_bits),
                       static_cast<int>(exp_field) - f.bias());
  }
  return negative ? -value : value;
}

}  // namespace pasa
