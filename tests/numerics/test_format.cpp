// SPDX-License-Identifier: Apache-2.0
// Tests of the number formats (pasa/format.h): exhaustive bit-pattern round trips, bit-for-bit agreement
// with the CUDA toolkit's host conversions (what the GPU kernels produce, so the emulator must match
// them), round_to examples for the cases the exhaustive tests cannot reach, and the format grammar.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pasa/error.h"
#include "pasa/format.h"
#include "test_util.h"

#if PASA_HAVE_CUDA_HEADERS
// Host-callable from a plain g++ translation unit, no macros needed; cuda_fp8.h includes the fp16 and
// bf16 headers itself, so the order does not matter.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace {

using pasa::decode_bits;
using pasa::encode_bits;
using pasa::Format;
using pasa::Overflow;
using pasa::round_to;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Format with_overflow(Format f, Overflow rule) {
  f.overflow = rule;
  return f;
}

// Same value and, for zeros, the same sign: round_to must keep -0.
bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

std::uint32_t canonical_nan(const Format& f) {
  return (((1u << f.exp_bits) - 1u) << f.man_bits) | ((1u << f.man_bits) - 1u);
}

// ---- 1. Exhaustive round trips --------------------------------------------------------------------

// ASSERTs stop at the first bad pattern of a format (not 65536 messages) and go on with the next one.
void expect_round_trips(const Format& f) {
  SCOPED_TRACE(f.name());
  const std::uint32_t patterns = 1u << pasa::bit_width(f);
  int nans = 0;
  for (std::uint32_t b = 0; b < patterns; ++b) {
    const double v = decode_bits(f, b);
    if (std::isnan(v)) {
      ++nans;
      ASSERT_EQ(encode_bits(f, v), canonical_nan(f)) << "NaN pattern " << b;
      continue;
    }
    ASSERT_EQ(encode_bits(f, v), b) << "value " << v;
    ASSERT_TRUE(same(round_to(f, v), v)) << "value " << v << " rounds to " << round_to(f, v);
  }
  // NaN counts pin down the special encodings: IEEE has 2 * (2^m - 1), e4m3 "fn" only +-all-ones.
  const int expected_nans = f.fn ? 2 : 2 * ((1 << f.man_bits) - 1);
  EXPECT_EQ(nans, expected_nans);
}

TEST(FormatRoundTrip, EveryPatternOfTheStorageFormats) {
  // Default overflow rules only: a ":sat" format reads an inf pattern as inf but writes it as max.
  for (const Format& f :
       {Format::fp16(), Format::bf16(), Format::e4m3(), Format::e5m2(), Format::floating(3, 2)}) {
    expect_round_trips(f);
  }
}

TEST(FormatRoundTrip, PositivePatternsDecodeInIncreasingOrder) {
  for (const Format& f : {Format::fp16(), Format::bf16(), Format::e4m3(), Format::e5m2()}) {
    SCOPED_TRACE(f.name());
    const std::uint32_t top = 1u << (f.exp_bits + f.man_bits);  // first negative pattern
    for (std::uint32_t b = 1; b < top && !std::isnan(decode_bits(f, b)); ++b) {
      ASSERT_LT(decode_bits(f, b - 1), decode_bits(f, b)) << "pattern " << b;
    }
    const std::uint32_t max_pattern = f.fn ? top - 2 : top - (1u << f.man_bits) - 1;
    EXPECT_EQ(decode_bits(f, max_pattern), f.max_finite());
  }
}

TEST(FormatRoundTrip, IntegersSaturateTheUnusedMostNegativePattern) {
  for (const Format& f : {Format::int8(), Format::int4()}) {
    SCOPED_TRACE(f.name());
    const int n = f.int_bits;
    for (std::uint32_t b = 0; b < (1u << n); ++b) {
      const double v = decode_bits(f, b);
      if (b == (1u << (n - 1))) {
        // Two's complement -2^(n-1) can come from a file, but the grid is symmetric: it saturates.
        EXPECT_EQ(v, -std::ldexp(1.0, n - 1));
        EXPECT_EQ(encode_bits(f, v), b + 1);
        continue;
      }
      EXPECT_EQ(encode_bits(f, v), b) << v;
      EXPECT_EQ(round_to(f, v), v);
    }
  }
}

TEST(FormatRoundTrip, BitsUpTo32WideAndNoWider) {
  EXPECT_THROW(encode_bits(pasa::parse_format("fp64"), 1.0), pasa::Error);
  EXPECT_THROW(decode_bits(pasa::parse_format("e11m21"), 0), pasa::Error);
  EXPECT_EQ(encode_bits(Format::fp32(), -1.0), 0xbf800000u);
  EXPECT_EQ(decode_bits(pasa::parse_format("e11m20"), 0x3ff00000u), 1.0);  // double's top word
}

// ---- 2. Agreement with the CUDA toolkit ---------------------------------------------------------

#if PASA_HAVE_CUDA_HEADERS

// Every float conversion candidate where rounding decides something: for each pair of neighbouring
// finite values a < b of the format (b one ulp past max_finite at the top, 0 and min subnormal at the
// bottom), a itself, the midpoint and the floats on either side of it; both signs; and the specials.
std::vector<float> boundary_floats(const Format& f) {
  std::vector<double> grid;
  for (std::uint32_t b = 0; !std::isnan(decode_bits(f, b)) && !std::isinf(decode_bits(f, b)); ++b) {
    grid.push_back(decode_bits(f, b));
  }
  grid.push_back(f.max_finite() + std::ldexp(1.0, f.max_exponent() - f.man_bits));
  std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX,
                           FLT_MIN, -FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN};
  auto add = [&](double v) {
    if (std::fabs(v) > FLT_MAX) return;
    const float x = static_cast<float>(v);  // exact: the midpoints need only man_bits + 2 bits
    for (float y : {x, std::nextafter(x, -INFINITY), std::nextafter(x, INFINITY)}) {
      xs.push_back(y);
      xs.push_back(-y);
    }
  };
  for (std::size_t i = 0; i + 1 < grid.size(); ++i) {
    add(grid[i]);
    add((grid[i] + grid[i + 1]) / 2);
  }
  add(grid.back());
  return xs;
}

// Random floats: n uniform bit patterns (mostly far outside fp8/fp16 range, they test the overflow
// and underflow paths) and n values with exponents spread over the format's range and a little beyond.
std::vector<float> random_floats(const Format& f, std::mt19937_64& rng, int n) {
  std::vector<float> xs;
  xs.reserve(2 * n);
  for (int i = 0; i < n; ++i) {
    const auto bits = static_cast<std::uint32_t>(rng());
    float x;
    std::memcpy(&x, &bits, sizeof x);
    xs.push_back(x);
  }
  std::uniform_int_distribution<int> exponent(f.min_exponent() - f.man_bits - 2,
                                              std::min(f.max_exponent() + 1, 127));
  for (int i = 0; i < n; ++i) {
    const std::uint64_t r = rng();
    const float mantissa = 1.0f + static_cast<float>(r & 0x7fffff) * 0x1p-23f;
    const float x = std::ldexp(mantissa, exponent(rng));
    xs.push_back((r >> 63) ? -x : x);
  }
  return xs;
}

template <class T>
std::uint32_t raw_bits(T value) {
  static_assert(sizeof(T) <= sizeof(std::uint32_t));
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);  // little-endian: the low bytes are the pattern
  return bits;
}

struct CudaConversion {
  const char* name;
  Format ours;
  std::uint32_t (*cuda)(float);
};

// CUDA's SATFINITE clamps overflow and +-inf to +-max finite, exactly our Overflow::saturate. Its
// NOSAT gives NaN for e4m3 (which has no inf: our to_nan default) and inf for e5m2 (our to_inf
// default), again for overflow and inf inputs alike, so every CUDA mode has an exact counterpart.
const CudaConversion kCudaConversions[] = {
    {"__float2half_rn", Format::fp16(), [](float x) { return raw_bits(__float2half_rn(x)); }},
    {"__float2bfloat16_rn", Format::bf16(),
     [](float x) { return raw_bits(__float2bfloat16_rn(x)); }},
    {"e4m3 NOSAT", Format::e4m3(),
     [](float x) { return raw_bits(__nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3)); }},
    {"e4m3 SATFINITE", with_overflow(Format::e4m3(), Overflow::saturate),
     [](float x) { return raw_bits(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); }},
    {"e5m2 NOSAT", Format::e5m2(),
     [](float x) { return raw_bits(__nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2)); }},
    {"e5m2 SATFINITE", with_overflow(Format::e5m2(), Overflow::saturate),
     [](float x) { return raw_bits(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)); }},
};

// Counts inputs where encode_bits differs from CUDA; NaN results only have to agree in NaN-ness
// (CUDA keeps the sign of a NaN from an e4m3 overflow, our canonical NaN is positive).
std::string disagreements(const CudaConversion& c, const std::vector<float>& xs) {
  std::ostringstream out;
  int count = 0;
  for (float x : xs) {
    const std::uint32_t theirs = c.cuda(x), ours = encode_bits(c.ours, x);
    const bool agree = std::isnan(decode_bits(c.ours, theirs))
                           ? std::isnan(decode_bits(c.ours, ours))
                           : ours == theirs;
    if (!agree && count++ < 8) {
      out << "\n  x = " << std::hexfloat << x << std::defaultfloat << " (" << x << "): cuda 0x"
          << std::hex << theirs << ", ours 0x" << ours << std::dec;
    }
  }
  return count == 0 ? "" : c.name + (": " + std::to_string(count) + " of " +
                                     std::to_string(xs.size()) + " differ" + out.str());
}

TEST(FormatCuda, BoundaryValuesMatchBitForBit) {
  for (const CudaConversion& c : kCudaConversions) {
    const std::vector<float> xs = boundary_floats(c.ours);
    EXPECT_EQ(disagreements(c, xs), "");
  }
}

TEST(FormatCuda, RandomFloatsMatchBitForBit) {
  const std::uint64_t seed = pasa::test::kFixedSeeds[0];
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const CudaConversion& c : kCudaConversions) {
    const std::vector<float> xs = random_floats(c.ours, rng, 1 << 20);  // 2M floats per conversion
    EXPECT_EQ(disagreements(c, xs), "");
  }
}

TEST(FormatCuda, DecodeMatchesCudaWidening) {
  auto check = [](const Format& f, std::uint32_t bits, float theirs) {
    EXPECT_TRUE(same(decode_bits(f, bits), theirs)) << f.name() << " pattern " << bits;
  };
  for (std::uint32_t b = 0; b < 65536; ++b) {
    __half_raw h;
    h.x = static_cast<unsigned short>(b);
    check(Format::fp16(), b, __half2float(__half(h)));
    __nv_bfloat16_raw bf;
    bf.x = static_cast<unsigned short>(b);
    check(Format::bf16(), b, __bfloat162float(__nv_bfloat16(bf)));
  }
  for (std::uint32_t b = 0; b < 256; ++b) {
    const auto fp8 = static_cast<__nv_fp8_storage_t>(b);
    check(Format::e4m3(), b, __half2float(__half(__nv_cvt_fp8_to_halfraw(fp8, __NV_E4M3))));
    check(Format::e5m2(), b, __half2float(__half(__nv_cvt_fp8_to_halfraw(fp8, __NV_E5M2))));
  }
}

#endif  // PASA_HAVE_CUDA_HEADERS

// fp32 has a reference everywhere: the hardware's double -> float conversion (round to nearest even,
// IEEE subnormals). Doubles spread over float's whole range, subnormals included.
TEST(FormatFp32, MatchesHardwareDoubleToFloat) {
  const std::uint64_t seed = pasa::test::kFixedSeeds[0];
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> exponent(-153, 127);
  int differ = 0;
  for (int i = 0; i < (1 << 19); ++i) {
    const std::uint64_t r = rng();
    const double x = std::ldexp(1.0 + static_cast<double>(r >> 12) * 0x1p-52, exponent(rng));
    const double signed_x = (r & 1) ? -x : x;
    if (std::fabs(signed_x) > FLT_MAX) continue;
    differ += !same(round_to(Format::fp32(), signed_x), static_cast<float>(signed_x));
  }
  EXPECT_EQ(differ, 0);
}

// ---- 3. round_to examples ------------------------------------------------------------------------

TEST(FormatRoundTo, Fp22KeepsFp32RangeWith13FractionBits) {
  const Format f = Format::fp22();
  EXPECT_EQ(f.max_finite(), std::ldexp(2.0 - 0x1p-13, 127));
  EXPECT_EQ(round_to(f, 1.0 + 0x1p-14), 1.0);                     // tie, even below
  EXPECT_EQ(round_to(f, 1.0 + 3 * 0x1p-14), 1.0 + 0x1p-12);       // tie, even above
  EXPECT_EQ(round_to(f, 1.0 + 0x1p-14 + 0x1p-40), 1.0 + 0x1p-13);  // just past the tie
  EXPECT_NEAR(round_to(f, 3.0e38), 3.0e38, 0x1p113);               // half an ulp at 2^127
  EXPECT_EQ(round_to(f, std::ldexp(2.0 - 0x1p-14, 127)), kInf);    // max + half ulp ties up
  EXPECT_EQ(round_to(f, 0x1p-139), 0x1p-139);                      // min subnormal
  EXPECT_EQ(round_to(f, 0x1p-140), 0.0);                           // half of it: tie to 0
  EXPECT_EQ(round_to(f, 1.5 * 0x1p-140), 0x1p-139);
  EXPECT_EQ(round_to(f, 0.1), 0x1.9998p-4);                        // 0x1.999999...p-4 cut to 13 bits
}

TEST(FormatRoundTo, ArbitraryE3M2) {
  // bias 3: normals 0.25 .. 14 (1.75 * 2^3), subnormals multiples of 2^-4.
  const Format f = pasa::parse_format("e3m2");
  EXPECT_EQ(f.max_finite(), 14.0);
  EXPECT_EQ(f.min_normal(), 0.25);
  EXPECT_EQ(round_to(f, 13.0), 12.0);  // tie between 12 (even) and 14
  EXPECT_EQ(round_to(f, 14.9), 14.0);
  EXPECT_EQ(round_to(f, 15.0), kInf);  // tie between 14 (odd) and 16: rounds to 16, overflows
  EXPECT_EQ(round_to(with_overflow(f, Overflow::saturate), 15.0), 14.0);
  EXPECT_TRUE(std::isnan(round_to(with_overflow(f, Overflow::to_nan), -15.0)));
  EXPECT_EQ(round_to(f, 0.03125), 0.0);        // half the smallest subnormal
  EXPECT_EQ(round_to(f, 0.0313), 0.0625);
  EXPECT_EQ(round_to(f, 3 * 0.03125), 0.125);  // 1.5 units: tie, even above
  EXPECT_EQ(round_to(f, 5 * 0.03125), 0.125);  // 2.5 units: tie, even below
  EXPECT_EQ(round_to(f, -0.2), -0.1875);
  EXPECT_EQ(round_to(f, 0.24), 0.25);          // subnormal rounding up into the normals
}

TEST(FormatRoundTo, Fp16SubnormalsAndTies) {
  const Format f = Format::fp16();
  EXPECT_EQ(round_to(f, 0x1p-25), 0.0);
  EXPECT_TRUE(std::signbit(round_to(f, -0x1p-25)));  // underflow keeps the sign
  EXPECT_EQ(round_to(f, 0x1.000002p-25), 0x1p-24);
  EXPECT_EQ(round_to(f, 3 * 0x1p-25), 0x1p-23);
  EXPECT_EQ(round_to(f, 0x1p-14 - 0x1p-26), 0x1p-14);  // largest subnormal + more than half an ulp
  EXPECT_EQ(round_to(f, 2049.0), 2048.0);
  EXPECT_EQ(round_to(f, 2051.0), 2052.0);
  EXPECT_EQ(round_to(f, -2051.0), -2052.0);
  EXPECT_EQ(round_to(f, 1.0 + 0x1p-11), 1.0);
  EXPECT_EQ(round_to(f, 1.0 + 0x1p-11 + 0x1p-40), 1.0 + 0x1p-10);
  EXPECT_EQ(round_to(f, 1e-300), 0.0);  // far below fp16 and float range
}

// round_up_to against the sorted finite values of fp16 and e4m3 (every bit pattern decoded): the least
// value at or above x; beyond the largest, the overflow rule's (inf, NaN, or the largest value when
// saturating); below -max, -max.
TEST(FormatRoundTo, RoundUpIsTheLeastValueAtOrAbove) {
  std::mt19937_64 rng(17);
  for (const Format& f : {Format::fp16(), Format::e4m3(), saturating(Format::fp16())}) {
    SCOPED_TRACE(f.name());
    std::vector<double> values;
    for (std::uint32_t bits = 0; bits < (1u << bit_width(f)); ++bits) {
      const double v = decode_bits(f, bits);
      if (std::isfinite(v)) values.push_back(v == 0.0 ? 0.0 : v);
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    const double top = f.max_finite();
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    for (int i = 0; i < 200000; ++i) {
      // magnitudes from far below the smallest subnormal to past the largest value, and the values
      // themselves (exact: they stay)
      const double x = i % 4 == 0 ? values[static_cast<std::size_t>(rng() % values.size())]
                                  : unit(rng) * std::ldexp(1.0, static_cast<int>(rng() % 48) - 30);
      const double got = round_up_to(f, x);
      const auto at = std::lower_bound(values.begin(), values.end(), x);
      if (x < -top) {
        ASSERT_EQ(got, -top) << x;
      } else if (at == values.end()) {  // above the largest value
        if (f.overflow == Overflow::saturate) {
          ASSERT_EQ(got, top) << x;
        } else {
          ASSERT_FALSE(std::isfinite(got)) << x;
        }
      } else {
        ASSERT_EQ(got, *at) << x;
      }
    }
  }
  EXPECT_TRUE(std::isnan(round_up_to(Format::fp16(), std::nan(""))));
  EXPECT_EQ(saturating(Format::fp16()).overflow, Overflow::saturate);
  EXPECT_EQ(saturating(Format::fp16()).name(), "fp16:sat");
}

TEST(FormatRoundTo, IntegersRoundToNearestEvenAndSaturateSymmetrically) {
  const Format i8 = Format::int8(), i4 = Format::int4();
  EXPECT_EQ(round_to(i8, 2.5), 2.0);
  EXPECT_EQ(round_to(i8, 3.5), 4.0);
  EXPECT_EQ(round_to(i8, -2.5), -2.0);
  EXPECT_EQ(round_to(i8, 0.49999999), 0.0);
  EXPECT_EQ(round_to(i8, 126.5), 126.0);
  EXPECT_EQ(round_to(i8, 127.49), 127.0);
  EXPECT_EQ(round_to(i8, 127.5), 127.0);
  EXPECT_EQ(round_to(i8, -128.0), -127.0);
  EXPECT_EQ(round_to(i8, 1e9), 127.0);
  EXPECT_EQ(round_to(i8, -kInf), -127.0);
  EXPECT_EQ(round_to(i4, 6.5), 6.0);
  EXPECT_EQ(round_to(i4, 7.5), 7.0);
  EXPECT_EQ(round_to(i4, -8.0), -7.0);
  EXPECT_EQ(round_to(i4, kInf), 7.0);
  EXPECT_TRUE(std::isnan(round_to(i4, kNaN)));
  EXPECT_EQ(encode_bits(i4, -3.0), 0xdu);
  EXPECT_EQ(encode_bits(i8, -1.0), 0xffu);
}

TEST(FormatRoundTo, Fp64IsTheIdentity) {
  const Format f = pasa::parse_format("fp64");
  std::mt19937_64 rng(pasa::test::kFixedSeeds[0]);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t bits = rng();
    double x;
    std::memcpy(&x, &bits, sizeof x);
    ASSERT_TRUE(same(round_to(f, x), x)) << std::hexfloat << x;
  }
  for (double x : {0.0, -0.0, DBL_MAX, -DBL_MAX, DBL_TRUE_MIN, kInf, -kInf}) {
    EXPECT_TRUE(same(round_to(f, x), x)) << x;
  }
  EXPECT_EQ(round_to(with_overflow(f, Overflow::saturate), -kInf), -DBL_MAX);
}

TEST(FormatRoundTo, OverflowRules) {
  const Format fp16 = Format::fp16(), e4m3 = Format::e4m3(), e5m2 = Format::e5m2();
  const Format fp16_sat = with_overflow(fp16, Overflow::saturate);
  const Format fp16_nan = with_overflow(fp16, Overflow::to_nan);
  const Format e4m3_sat = with_overflow(e4m3, Overflow::saturate);
  const Format e5m2_sat = with_overflow(e5m2, Overflow::saturate);
  EXPECT_EQ(fp16.max_finite(), 65504.0);
  EXPECT_EQ(Format::bf16().max_finite(), 0x1.fep127);
  EXPECT_EQ(e4m3.max_finite(), 448.0);
  EXPECT_EQ(e5m2.max_finite(), 57344.0);
  EXPECT_EQ(Format::fp32().max_finite(), static_cast<double>(FLT_MAX));
  EXPECT_EQ(Format::int8().max_finite(), 127.0);
  EXPECT_EQ(Format::int4().max_finite(), 7.0);
  // to_inf: below max + half ulp rounds down; the tie itself goes to its even neighbour, the next
  // power of two, which overflows.
  EXPECT_EQ(round_to(fp16, 65519.99), 65504.0);
  EXPECT_EQ(round_to(fp16, -65520.0), -kInf);
  EXPECT_EQ(round_to(fp16, kInf), kInf);
  EXPECT_EQ(round_to(e5m2, 61439.0), 57344.0);
  EXPECT_EQ(round_to(e5m2, 61440.0), kInf);
  EXPECT_EQ(round_to(e5m2, -kInf), -kInf);
  // saturate: overflow and inf clamp, keeping the sign.
  EXPECT_EQ(round_to(fp16_sat, 1e6), 65504.0);
  EXPECT_EQ(round_to(fp16_sat, -kInf), -65504.0);
  EXPECT_EQ(round_to(e4m3_sat, kInf), 448.0);
  EXPECT_EQ(round_to(e4m3_sat, -500.0), -448.0);
  EXPECT_EQ(round_to(e5m2_sat, 61440.0), 57344.0);
  EXPECT_EQ(round_to(e5m2_sat, -kInf), -57344.0);
  // to_nan: e4m3's tie at 464 still rounds down to 448 (even); anything above is NaN, as is inf.
  EXPECT_EQ(round_to(e4m3, 464.0), 448.0);
  EXPECT_TRUE(std::isnan(round_to(e4m3, 464.0001)));
  EXPECT_TRUE(std::isnan(round_to(e4m3, -kInf)));
  EXPECT_TRUE(std::isnan(round_to(fp16_nan, kInf)));
  EXPECT_TRUE(std::isnan(round_to(fp16_nan, 70000.0)));
  EXPECT_EQ(encode_bits(e4m3, 1e9), 0x7fu);
  EXPECT_EQ(encode_bits(e5m2, -1e9), 0xfcu);
  for (const Format& f : {fp16, e4m3, e5m2_sat, Format::fp22(), Format::fp32()}) {
    EXPECT_TRUE(std::isnan(round_to(f, kNaN))) << f.name();
  }
}

// ---- 4. The format grammar -----------------------------------------------------------------------

TEST(FormatParse, NamesAndAliasesRoundTrip) {
  // text, canonical name; a rule equal to the format's default is dropped from the name.
  const std::pair<const char*, const char*> cases[] = {
      {"fp32", "fp32"},     {"f32", "fp32"},         {"float32", "fp32"},     {"fp16", "fp16"},
      {"f16", "fp16"},      {"half", "fp16"},        {"float16", "fp16"},     {"bf16", "bf16"},
      {"bfloat16", "bf16"}, {"e4m3", "e4m3"},        {"e4m3fn", "e4m3"},      {"fp8_e4m3", "e4m3"},
      {"fp8e4m3", "e4m3"},  {"e5m2", "e5m2"},        {"fp8_e5m2", "e5m2"},    {"fp8e5m2", "e5m2"},
      {"fp22", "fp22"},     {"e8m13", "fp22"},        {"fp64", "fp64"},        {"f64", "fp64"},
      {"float64", "fp64"},  {"int8", "int8"},        {"int4", "int4"},        {"e4m3:sat", "e4m3:sat"},
      {"e5m2:sat", "e5m2:sat"}, {"e5m2:nan", "e5m2:nan"}, {"fp16:sat", "fp16:sat"},
      {"fp64:sat", "fp64:sat"}, {"FP8_E4M3:SAT", "e4m3:sat"}, {"e4m3:nan", "e4m3"},
      {"e5m2:inf", "e5m2"}, {"int8:sat", "int8"},    {"e3m2", "e3m2"},        {"e2m0", "e2m0"},
      {"e5m10", "fp16"},    {"e8m7", "bf16"},        {"e8m23", "fp32"},       {"e11m52", "fp64"},
  };
  for (const auto& [text, canonical] : cases) {
    const Format f = pasa::parse_format(text);
    EXPECT_EQ(f.name(), canonical) << text;
    EXPECT_EQ(pasa::parse_format(f.name()), f) << text;
  }
  EXPECT_EQ(pasa::parse_format("fp22"), Format::fp22());
  EXPECT_EQ(pasa::parse_format("e4m3"), Format::e4m3());
  EXPECT_EQ(pasa::parse_format("e4m3:sat").overflow, Overflow::saturate);
  EXPECT_EQ(pasa::parse_format("e5m2:sat"), with_overflow(Format::e5m2(), Overflow::saturate));
}

TEST(FormatParse, BadTextThrowsNamingIt) {
  for (const char* text : {"fp9", "e1m3", "e12m3", "e5m60", "int3", "e4m3:inf", "", "e5m2:",
                           "e5m2:foo", "int8:nan", "e 5m2", "e+5m2", "e5m-2", "e5", "em2", "e5m",
                           "e5m2x", "fp16 "}) {
    try {
      pasa::parse_format(text);
      ADD_FAILURE() << "'" << text << "' parsed";
    } catch (const pasa::Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(text) + "'"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
