// SPDX-License-Identifier: Apache-2.0
// .safetensors reading and writing: round trips, the writer's layout (sorted names, 8-byte aligned
// space-padded header), files as the Python library writes them, and a pasa::Error naming the file and
// the problem for every class of malformed file.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "io/io_test_helpers.h"
#include "pasa/error.h"
#include "pasa/io.h"
#include "text/json.h"

namespace pasa::io::test {
namespace {

const std::string kSource = "weights.safetensors";

std::vector<std::uint8_t> st_file(std::string_view header, const std::vector<std::uint8_t>& data = {}) {
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(header.size() >> (8 * i)));
  append(out, header);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// A header with the single tensor "x" whose entry is the given JSON members.
std::string one_tensor(std::string_view members) { return "{\"x\": {" + std::string(members) + "}}"; }

std::vector<std::uint8_t> zeros(std::size_t n) { return std::vector<std::uint8_t>(n, 0); }

::testing::AssertionResult parse_fails(const std::vector<std::uint8_t>& file,
                                       std::initializer_list<std::string_view> phrases) {
  return throws_error([&] { parse_safetensors(file, kSource); }, kSource, phrases);
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void expect_same(const std::map<std::string, HostTensor>& a, const std::map<std::string, HostTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_EQ(b.count(name), 1u) << name;
    EXPECT_EQ(b.at(name).dtype, t.dtype) << name;
    EXPECT_EQ(b.at(name).shape, t.shape) << name;
    EXPECT_EQ(b.at(name).bytes, t.bytes) << name;
  }
}

class SafetensorsRoundTrip : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(SafetensorsRoundTrip, WriteThenReadGivesTheSameTensor) {
  const auto [dtype, rank] = GetParam();
  const std::vector<std::int64_t> dims = {3, 5, 2, 7};
  const std::map<std::string, HostTensor> tensors = {
      {"t", random_tensor(dtype, {dims.begin(), dims.begin() + rank}, 31u * rank)}};
  TempDir dir;
  write_safetensors(dir.file("t.safetensors"), tensors);
  expect_same(tensors, read_safetensors(dir.file("t.safetensors")));
}

INSTANTIATE_TEST_SUITE_P(AllDtypesRanks1To4, SafetensorsRoundTrip,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::Range(1, 5)));

TEST(Safetensors, RoundTripsManyTensorsOfMixedDtypesAndRanks) {
  const std::map<std::string, HostTensor> tensors = {
      {"q", random_tensor(DType::bf16, {1, 4, 17, 64}, 1)},
      {"k", random_tensor(DType::f16, {4, 17, 64}, 2)},
      {"v", random_tensor(DType::f32, {13}, 3)},
      {"layers.0.scale", random_tensor(DType::f32, {}, 4)},
      {"empty", random_tensor(DType::f16, {0, 8}, 5)},
  };
  TempDir dir;
  write_safetensors(dir.file("m.safetensors"), tensors);
  expect_same(tensors, read_safetensors(dir.file("m.safetensors")));
  write_safetensors(dir.file("none.safetensors"), {});
  EXPECT_TRUE(read_safetensors(dir.file("none.safetensors")).empty());
}

TEST(Safetensors, WriterSortsNamesAndPadsTheHeaderTo8Bytes) {
  const std::map<std::string, HostTensor> tensors = {{"b", random_tensor(DType::f32, {3}, 1)},
                                                     {"a", random_tensor(DType::bf16, {2, 1}, 2)},
                                                     {"c", random_tensor(DType::f16, {1}, 3)}};
  TempDir dir;
  write_safetensors(dir.file("w.safetensors"), tensors);
  const auto bytes = file_bytes(dir.file("w.safetensors"));
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{bytes[i]} << (8 * i);
  ASSERT_LE(8 + n, bytes.size());
  EXPECT_EQ(n % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
  using text::Json;
  const Json json = Json::parse(header);
  EXPECT_EQ(json.at("a").at("dtype"), Json("BF16"));
  EXPECT_EQ(json.at("a").at("shape"), Json::array({2, 1}));
  EXPECT_EQ(json.at("a").at("data_offsets"), Json::array({0, 4}));
  EXPECT_EQ(json.at("b").at("dtype"), Json("F32"));
  EXPECT_EQ(json.at("b").at("data_offsets"), Json::array({4, 16}));
  EXPECT_EQ(json.at("c").at("dtype"), Json("F16"));
  EXPECT_EQ(json.at("c").at("data_offsets"), Json::array({16, 18}));
  std::vector<std::uint8_t> data;
  for (const char* name : {"a", "b", "c"}) {
    data.insert(data.end(), tensors.at(name).bytes.begin(), tensors.at(name).bytes.end());
  }
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end()), data);
}

TEST(Safetensors, ReadsFilesAsThePythonLibraryWritesThem) {
  // Metadata first, tensors out of name order, data laid out in another order again.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},)"
      R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}    )";
  std::vector<std::uint8_t> data = {0, 0, 128, 63, 0, 0, 0, 64, 128, 63, 0, 64};
  const auto tensors = parse_safetensors(st_file(header, data), kSource);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors.at("a").dtype, DType::f32);
  EXPECT_EQ(tensors.at("a").shape, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(tensors.at("a").bytes, std::vector<std::uint8_t>(data.begin(), data.begin() + 8));
  EXPECT_EQ(tensors.at("w").dtype, DType::bf16);
  EXPECT_EQ(tensors.at("w").bytes, std::vector<std::uint8_t>(data.begin() + 8, data.end()));
}

TEST(Safetensors, RejectsTruncatedHeaderLength) {
  EXPECT_TRUE(parse_fails({}, {"truncated header", "0 bytes"}));
  EXPECT_TRUE(parse_fails(bytes_of(std::string("\x02\x00\x00", 3)), {"truncated header", "3 bytes"}));
}

TEST(Safetensors, NamesANpyFile) {
  const char npy[] = "\x93NUMPY\x01\x00\x10\x00{'shape': (1,)}";
  EXPECT_TRUE(parse_fails(bytes_of(std::string(npy, sizeof npy - 1)), {"a .npy file (it begins with numpy's magic \\x93NUMPY), not a .safetensors"}));
}

TEST(Safetensors, RejectsHeaderLengthBeyondTheFile) {
  auto file = st_file("{}");
  file[0] = 3;
  EXPECT_TRUE(parse_fails(file, {"header length 3 exceeds the 2 bytes"}));
  file[7] = 0x80;  // a length near 2^63, which must not overflow the bounds check
  EXPECT_TRUE(parse_fails(file, {"exceeds"}));
}

TEST(Safetensors, RejectsBadJson) {
  EXPECT_TRUE(parse_fails(st_file("{\"x\": "), {"not valid JSON"}));
  EXPECT_TRUE(parse_fails(st_file(""), {"not valid JSON"}));
  EXPECT_TRUE(parse_fails(st_file("{\"x\": 1} trailing"), {"not valid JSON"}));
  EXPECT_TRUE(parse_fails(st_file("{\"\xff\": 1}"), {"not valid JSON"}));
  EXPECT_TRUE(parse_fails(st_file("[1, 2]"), {"header is a JSON array, not an object"}));
}

TEST(Safetensors, RejectsMalformedEntries) {
  EXPECT_TRUE(parse_fails(st_file(R"({"x": [1]})"), {"tensor 'x'", "not an object"}));
  EXPECT_TRUE(parse_fails(st_file(one_tensor(R"("shape": [], "data_offsets": [0, 4])"), zeros(4)),
                          {"tensor 'x'", "missing \"dtype\""}));
  EXPECT_TRUE(parse_fails(st_file(one_tensor(R"("dtype": "F32", "data_offsets": [0, 4])"), zeros(4)),
                          {"tensor 'x'", "missing \"shape\""}));
  EXPECT_TRUE(parse_fails(st_file(one_tensor(R"("dtype": "F32", "shape": [])"), zeros(4)),
                          {"tensor 'x'", "missing \"data_offsets\""}));
  EXPECT_TRUE(parse_fails(st_file(one_tensor(R"("dtype": 1, "shape": [], "data_offsets": [0, 4])"), zeros(4)),
                          {"tensor 'x'", "\"dtype\" is a number"}));
  EXPECT_TRUE(parse_fails(st_file(one_tensor(R"("dtype": "F32", "shape": 4, "data_offsets": [0, 16])")),
                          {"tensor 'x'", "\"shape\" is a number, not an array"}));
  EXPECT_TRUE(
      parse_fails(st_file(one_tensor(R"("dtype": "F32", "shape": [], "data_offsets": [0])"), zeros(4)),
                  {"tensor 'x'", "not an array [begin, end]"}));
}

TEST(Safetensors, RejectsUnsupportedDtypesNamingTheTensor) {
  for (const char* dtype : {"F64", "I8", "F8_E4M3", "f32"}) {
    const auto file = st_file(
        R"({"layer.q": {"dtype": ")" + std::string(dtype) + R"(", "shape": [1], "data_offsets": [0, 4]}})",
        zeros(4));
    EXPECT_TRUE(parse_fails(file, {"tensor 'layer.q'", "unsupported dtype '" + std::string(dtype) + "'"}));
  }
}

TEST(Safetensors, RejectsBadDimensions) {
  const auto with_shape = [](std::string_view shape) {
    return st_file(
        one_tensor(R"("dtype": "F32", "shape": )" + std::string(shape) + R"(, "data_offsets": [0, 4])"),
        zeros(4));
  };
  EXPECT_TRUE(parse_fails(with_shape("[-1]"), {"tensor 'x'", "negative value -1"}));
  EXPECT_TRUE(parse_fails(with_shape("[1.5]"), {"tensor 'x'", "\"shape\" holds a number"}));
  EXPECT_TRUE(parse_fails(with_shape("[\"4\"]"), {"tensor 'x'", "\"shape\" holds a string"}));
  EXPECT_TRUE(parse_fails(with_shape("[18446744073709551615]"), {"tensor 'x'", "does not fit in 63 bits"}));
  EXPECT_TRUE(parse_fails(with_shape("[1e300]"), {"tensor 'x'", "holds a number"}));
  EXPECT_TRUE(
      parse_fails(with_shape("[4294967296, 4294967296]"), {"tensor 'x'", "element count", "overflows"}));
  EXPECT_TRUE(parse_fails(with_shape("[4611686018427387904]"), {"tensor 'x'", "byte size", "overflows"}));
  EXPECT_TRUE(parse_fails(with_shape("[1, 1, 1, 1, 1, 1, 1, 1, 1]"), {"tensor 'x'", "rank 9 exceeds"}));
}

TEST(Safetensors, RejectsBadOffsets) {
  const auto with_offsets = [](std::string_view offsets, std::size_t data) {
    return st_file(one_tensor(R"("dtype": "F32", "shape": [2], "data_offsets": )" + std::string(offsets)),
                   zeros(data));
  };
  EXPECT_TRUE(parse_fails(with_offsets("[0, 16]", 8), {"tensor 'x'", "[0, 16] out of range", "has 8 bytes"}));
  EXPECT_TRUE(parse_fails(with_offsets("[18446744073709551608, 18446744073709551615]", 8), {"out of range"}));
  EXPECT_TRUE(parse_fails(with_offsets("[8, 0]", 8), {"tensor 'x'", "begin > end"}));
  EXPECT_TRUE(parse_fails(with_offsets("[0, 4]", 8), {"tensor 'x'", "size mismatch", "span 4", "needs 8"}));
  EXPECT_TRUE(parse_fails(with_offsets("[-8, 0]", 8), {"tensor 'x'", "negative value -8"}));
  EXPECT_TRUE(parse_fails(with_offsets("[0, \"8\"]", 8), {"tensor 'x'", "\"data_offsets\" holds a string"}));
}

TEST(Safetensors, RejectsGapsOverlapsAndExtraData) {
  const std::string two = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                          R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": )";
  EXPECT_TRUE(
      parse_fails(st_file(two + "[8, 12]}}", zeros(12)), {"[4, 8) before tensor 'b' belong to no tensor"}));
  EXPECT_TRUE(parse_fails(st_file(two + "[0, 4]}}", zeros(4)), {"overlaps"}));
  EXPECT_TRUE(
      parse_fails(st_file(two + "[4, 8]}}", zeros(11)), {"extra data", "3 bytes after the last tensor"}));
  EXPECT_TRUE(parse_fails(st_file("{}", zeros(1)), {"extra data", "1 bytes"}));
}

TEST(Safetensors, RejectsMetadataThatIsNotAnObjectOfStrings) {
  const std::string x = R"("x": {"dtype": "F16", "shape": [], "data_offsets": [0, 2]})";
  for (const char* metadata : {"[]", "\"pt\"", "{\"format\": 1}", "{\"a\": {\"b\": \"c\"}}"}) {
    const auto file = st_file("{\"__metadata__\": " + std::string(metadata) + ", " + x + "}", zeros(2));
    EXPECT_TRUE(parse_fails(file, {"\"__metadata__\" must be an object of strings"})) << metadata;
  }
}

TEST(Safetensors, FileErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.file("missing.safetensors");
  EXPECT_TRUE(throws_error([&] { read_safetensors(missing); }, missing, {"cannot open"}));
  const std::string path = dir.file("t.safetensors");
  write_safetensors(path, {{"x", random_tensor(DType::f32, {4}, 1)}});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  EXPECT_TRUE(throws_error([&] { read_safetensors(path); }, path, {"tensor 'x'", "out of range"}));
  const std::string no_dir = dir.file("no/such/dir.safetensors");
  EXPECT_TRUE(throws_error([&] { write_safetensors(no_dir, {}); }, no_dir, {"cannot open for writing"}));
}

TEST(Safetensors, WriteRejectsWhatCouldNotBeReadBack) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  HostTensor short_tensor = random_tensor(DType::bf16, {3}, 1);
  short_tensor.bytes.pop_back();
  const auto write_one = [&path](const std::string& name, const HostTensor& tensor) {
    return [&path, name, tensor] { write_safetensors(path, {{name, tensor}}); };
  };
  EXPECT_TRUE(throws_error(write_one("s", short_tensor), path, {"tensor 's'", "holds 5 bytes", "needs 6"}));
  const HostTensor ok = random_tensor(DType::f32, {1}, 1);
  EXPECT_TRUE(throws_error(write_one("__metadata__", ok), path, {"reserved"}));
  EXPECT_TRUE(throws_error(write_one("\xff\xfe", ok), path, {"cannot encode the header"}));
}

}  // namespace
}  // namespace pasa::io::test
