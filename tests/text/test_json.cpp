// SPDX-License-Identifier: Apache-2.0
// text::Json, the parser behind .safetensors headers and plans (untrusted input) and the writer of
// the CLI's result files: strict RFC 8259 parsing, integer ranges, UTF-8, and round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "text/json.h"

namespace pasa::text {
namespace {

bool parse_fails(const std::string& text) {
  try {
    Json::parse(text);
  } catch (const JsonError&) {
    return true;
  }
  return false;
}

TEST(Json, ParsesEveryKindOfValue) {
  const Json j = Json::parse(R"( {"a": [1, -2, 3.5, 1e2, true, false, null], "s": "x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "o": {}} )");
  ASSERT_TRUE(j.is_object());
  const Json::Array& a = j.at("a").as_array();
  ASSERT_EQ(a.size(), 7u);
  EXPECT_EQ(a[0].as_int64(), 1);
  EXPECT_EQ(a[1].as_int64(), -2);
  EXPECT_EQ(a[2].as_double(), 3.5);
  EXPECT_FALSE(a[3].is_integer());  // an exponent makes it a double
  EXPECT_EQ(a[3].as_double(), 100.0);
  EXPECT_TRUE(a[4].as_bool());
  EXPECT_FALSE(a[5].as_bool());
  EXPECT_TRUE(a[6].is_null());
  EXPECT_EQ(j.at("s").as_string(), "x\"\\/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(j.at("o").as_object().empty());
  EXPECT_EQ(j.find("missing"), nullptr);
  EXPECT_THROW(j.at("missing"), JsonError);
}

TEST(Json, IntegersKeepTheirFullRange) {
  EXPECT_EQ(Json::parse("18446744073709551615").as_uint64(), 18446744073709551615ULL);
  EXPECT_THROW(Json::parse("18446744073709551615").as_int64(), JsonError);
  EXPECT_EQ(Json::parse("-9223372036854775808").as_int64(), INT64_MIN);
  EXPECT_THROW(Json::parse("-1").as_uint64(), JsonError);
  EXPECT_FALSE(Json::parse("18446744073709551616").is_integer());  // beyond uint64: a double
  EXPECT_THROW(Json::parse("1.5").as_int64(), JsonError);
  EXPECT_THROW(Json::parse("\"4\"").as_double(), JsonError);
}

TEST(Json, RejectsMalformedText) {
  for (const char* bad : {"", " ", "{", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a: 1}", "01", "1.", ".5", "-",
                          "1e", "+1", "tru", "nul", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"",
                          "\"\\udc00\"", "\"tab\there\"", "[1] 2", "NaN", "1e999", "{\"a\":1,\"a\":2}",
                          "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\""}) {
    EXPECT_TRUE(parse_fails(bad)) << bad;
  }
  EXPECT_FALSE(parse_fails(std::string(100, '[') + std::string(100, ']')));
  EXPECT_TRUE(parse_fails(std::string(200, '[') + std::string(200, ']')));  // nesting limit
}

TEST(Json, DumpsCompactOrIndentedAndRoundTrips) {
  Json j = Json::object({{"b", Json::array({1, 2.5, "t"})}, {"a", nullptr}, {"c", true}});
  j["d"] = std::vector<std::int64_t>{3, 4};
  j["e"].push_back(1.0);
  EXPECT_EQ(j.dump(), R"({"a":null,"b":[1,2.5,"t"],"c":true,"d":[3,4],"e":[1.0]})");
  EXPECT_EQ(Json::object({{"k", Json::array({1})}}).dump(1), "{\n \"k\": [\n  1\n ]\n}");
  EXPECT_EQ(Json::parse(j.dump(2)), j);
  EXPECT_EQ(Json(NAN).dump(), "null");
  EXPECT_EQ(Json(0.1).dump(), "0.1");
  EXPECT_EQ(Json(18446744073709551615ULL).dump(), "18446744073709551615");
  EXPECT_EQ(Json("q\"\n\x01\xc3\xa9").dump(), "\"q\\\"\\n\\u0001\xc3\xa9\"");
  EXPECT_THROW(Json("bad \xff").dump(), JsonError);
  EXPECT_THROW(Json(1)["key"], JsonError);
}

}  // namespace
}  // namespace pasa::text
