// SPDX-License-Identifier: Apache-2.0
// text::format, the brace formatter behind every message and table: each spec the project uses, the
// shortest round-trip form of "{}" for doubles, and errors for malformed patterns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "text/format.h"

namespace pasa::text {
namespace {

TEST(Format, PlainFieldsInOrderAndByIndex) {
  EXPECT_EQ(format("{}: {} of {}", "q", 3, std::string("x")), "q: 3 of x");
  EXPECT_EQ(format("{1} before {0}", "a", "b"), "b before a");
  EXPECT_EQ(format("{{literal}} {}", 1), "{literal} 1");
  EXPECT_EQ(format("{} {} {}", true, 'c', std::int64_t{-9'000'000'000}), "true c -9000000000");
  EXPECT_EQ(format("{}", std::numeric_limits<std::uint64_t>::max()), "18446744073709551615");
  EXPECT_EQ(format("{}", std::numeric_limits<std::int64_t>::min()), "-9223372036854775808");
}

TEST(Format, DoublesWithoutSpecAreShortestRoundTrip) {
  EXPECT_EQ(format("{}", 0.1), "0.1");
  EXPECT_EQ(format("{}", 1.0), "1");
  EXPECT_EQ(format("{}", -2.5), "-2.5");
  EXPECT_EQ(format("{}", 0.984497), "0.984497");
  EXPECT_EQ(format("{}", 1e-5), "1e-05");
  EXPECT_EQ(format("{}", 0.0001), "0.0001");
  EXPECT_EQ(format("{}", 123456789012345.0), "123456789012345");
  EXPECT_EQ(format("{}", 1e16), "1e+16");
  EXPECT_EQ(format("{}", 1.5e300), "1.5e+300");
  EXPECT_EQ(format("{}", 1.0f / 3.0f), "0.3333333432674408");  // the float widened to double
  EXPECT_EQ(format("{} {} {}", INFINITY, -INFINITY, NAN), "inf -inf nan");
  for (double x : {0.1, 1.0 / 3.0, 6.02214076e23, 5e-324, 1.7976931348623157e308}) {
    EXPECT_EQ(std::strtod(format("{}", x).c_str(), nullptr), x) << x;
  }
}

TEST(Format, FloatingSpecsMatchPrintf) {
  EXPECT_EQ(format("{:.3f}", 3.14159), "3.142");
  EXPECT_EQ(format("{:.1f}%", 12.25), "12.2%");  // printf rounds the binary value, 12.25 is a tie
  EXPECT_EQ(format("{:.3e}", 0.000123456), "1.235e-04");
  EXPECT_EQ(format("{:g}", 0.0001), "0.0001");
  EXPECT_EQ(format("{:g}", 1234567.0), "1.23457e+06");
  EXPECT_EQ(format("{:.4g}", 2.0), "2");
  EXPECT_EQ(format("{:8.2f}|", -1.5), "   -1.50|");
  EXPECT_EQ(format("{:+.1f}", 2.0), "+2.0");
}

TEST(Format, WidthAlignFillAndIntegerTypes) {
  EXPECT_EQ(format("[{:>4}]", 7), "[   7]");
  EXPECT_EQ(format("[{:<6}]", "ab"), "[ab    ]");
  EXPECT_EQ(format("[{:6}]", "ab"), "[ab    ]");  // strings default to the left
  EXPECT_EQ(format("[{:6}]", 42), "[    42]");   // numbers to the right
  EXPECT_EQ(format("[{:^7}]", "mid"), "[  mid  ]");
  EXPECT_EQ(format("[{:*>5}]", 1), "[****1]");
  EXPECT_EQ(format("[{:2}/{}]", 3, 10), "[ 3/10]");
  EXPECT_EQ(format("{:05}", -42), "-0042");
  EXPECT_EQ(format("{:x} {:X} {:b}", 255, 255u, 5), "ff FF 101");
  EXPECT_EQ(format("{:.2}", "abcdef"), "ab");
  EXPECT_EQ(format("[{:>3}]", "toolong"), "[toolong]");
}

TEST(Format, MalformedPatternsThrow) {
  EXPECT_THROW(format("{}"), std::invalid_argument);            // missing argument
  EXPECT_THROW(format("{", 1), std::invalid_argument);          // unmatched brace
  EXPECT_THROW(format("}", 1), std::invalid_argument);
  EXPECT_THROW(format("{:q}", 1), std::invalid_argument);       // unknown integer type
  EXPECT_THROW(format("{:.2d}", 1), std::invalid_argument);     // precision on an integer
  EXPECT_THROW(format("{:f}", "text"), std::invalid_argument);  // float type on a string
  EXPECT_THROW(format("{:>4z}", 1.0), std::invalid_argument);
  EXPECT_THROW(format("{x}", 1), std::invalid_argument);        // bad index
}

TEST(Format, Join) {
  EXPECT_EQ(join(std::vector<std::string>{"exact", "pasa", "sage8"}, ", "), "exact, pasa, sage8");
  EXPECT_EQ(join(std::vector<std::string>{}, ", "), "");
  EXPECT_EQ(join(std::vector<std::string>{"", "b"}, "+"), "+b");
}

}  // namespace
}  // namespace pasa::text
