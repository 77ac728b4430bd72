// SPDX-License-Identifier: Apache-2.0
// .npy reading and writing: round trips, byte-exact agreement with np.save, the header syntax numpy
// produces, and a pasa::Error naming the file and the problem for every class of malformed file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "io/io_test_helpers.h"
#include "test_util.h"
#include "pasa/error.h"
#include "pasa/io.h"

namespace pasa::io::test {
namespace {

const std::string kSource = "capture.npy";

// A .npy file with the header text exactly as given (no padding added) and the given data.
std::vector<std::uint8_t> npy_file(std::string_view header, const std::vector<std::uint8_t>& data = {},
                                   int major = 1) {
  std::vector<std::uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  const int length_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < length_bytes; ++i) out.push_back(static_cast<std::uint8_t>(header.size() >> (8 * i)));
  append(out, header);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string dict(std::string_view descr, std::string_view shape) {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + std::string(shape) +
         ", }";
}

std::vector<std::uint8_t> zeros(std::size_t n) { return std::vector<std::uint8_t>(n, 0); }

::testing::AssertionResult parse_fails(const std::vector<std::uint8_t>& file,
                                       std::initializer_list<std::string_view> phrases) {
  return throws_error([&] { parse_npy(file, kSource); }, kSource, phrases);
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

class NpyRoundTrip : public ::testing::TestWithParam<std::tuple<DType, int>> {};

TEST_P(NpyRoundTrip, WriteThenReadGivesTheSameTensor) {
  const auto [dtype, rank] = GetParam();
  const std::vector<std::int64_t> dims = {3, 5, 2, 7};
  const HostTensor t = random_tensor(dtype, {dims.begin(), dims.begin() + rank}, 17u * rank);
  TempDir dir;
  const std::string path = dir.file("t.npy");
  write_npy(path, t);
  const HostTensor back = read_npy(path);
  EXPECT_EQ(back.dtype, t.dtype);
  EXPECT_EQ(back.shape, t.shape);
  EXPECT_EQ(back.bytes, t.bytes);
  // The file is 64-byte aligned at the data, as numpy writes it.
  EXPECT_EQ((file_bytes(path).size() - t.bytes.size()) % 64, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllDtypesRanks1To4, NpyRoundTrip,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f16, DType::bf16),
                                            ::testing::Range(1, 5)));

TEST(Npy, RoundTripsScalarsAndEmptyTensors) {
  TempDir dir;
  for (const auto& shape : {std::vector<std::int64_t>{}, {0}, {4, 0, 3}}) {
    const HostTensor t = random_tensor(DType::f16, shape, 5);
    write_npy(dir.file("t.npy"), t);
    const HostTensor back = read_npy(dir.file("t.npy"));
    EXPECT_EQ(back.shape, t.shape);
    EXPECT_EQ(back.bytes, t.bytes);
  }
}

TEST(Npy, WritesExactlyWhatNpSaveWrites) {
  // np.save(f, np.arange(6, dtype='<f4').reshape(2, 3)) and np.save(f, np.zeros(5, '<f2')).
  struct Case {
    DType dtype;
    std::vector<std::int64_t> shape;
    std::string header;
  };
  const Case cases[] = {{DType::f32, {2, 3}, dict("<f4", "(2, 3)")},
                        {DType::f16, {5}, dict("<f2", "(5,)")},
                        {DType::f32, {}, dict("<f4", "()")}};
  TempDir dir;
  for (const Case& c : cases) {
    const HostTensor t = random_tensor(c.dtype, c.shape, 3);
    write_npy(dir.file("t.npy"), t);
    std::string header = c.header;
    header.append(127 - 10 - header.size(), ' ');
    header += '\n';
    EXPECT_EQ(file_bytes(dir.file("t.npy")), npy_file(header, t.bytes)) << c.header;
  }
}

TEST(Npy, Bf16UsesTheBfloat16Descr) {
  TempDir dir;
  write_npy(dir.file("b.npy"), random_tensor(DType::bf16, {2}, 1));
  const auto bytes = file_bytes(dir.file("b.npy"));
  EXPECT_NE(std::string(bytes.begin(), bytes.end()).find("'descr': 'bfloat16'"), std::string::npos);
  const HostTensor t = parse_npy(npy_file(dict("bfloat16", "(3,)"), zeros(6)), kSource);
  EXPECT_EQ(t.dtype, DType::bf16);
}

TEST(Npy, ReadsVersion2And3Headers) {
  for (const int major : {2, 3}) {
    const HostTensor t = parse_npy(npy_file(dict("<f4", "(2, 2)"), zeros(16), major), kSource);
    EXPECT_EQ(t.shape, (std::vector<std::int64_t>{2, 2}));
    EXPECT_EQ(t.bytes.size(), 16u);
  }
}

TEST(Npy, AcceptsAnyKeyOrderQuotesAndSpacing) {
  const std::string headers[] = {
      "{'shape': (2, 3), 'descr': '<f2', 'fortran_order': False}",
      "{\"fortran_order\": False, \"shape\": (2,3), \"descr\": \"<f2\"}\n",
      "  {  'descr' :'<f2' ,\t'fortran_order':False,'shape':( 2 , 3 , ) , }     \n",
  };
  for (const std::string& header : headers) {
    const HostTensor t = parse_npy(npy_file(header, zeros(12)), kSource);
    EXPECT_EQ(t.dtype, DType::f16) << header;
    EXPECT_EQ(t.shape, (std::vector<std::int64_t>{2, 3})) << header;
  }
}

TEST(Npy, RejectsBadMagic) {
  EXPECT_TRUE(parse_fails({}, {"bad magic"}));
  EXPECT_TRUE(parse_fails(bytes_of("\x93NUMPZ\x01\x00"), {"bad magic"}));
  EXPECT_TRUE(parse_fails(bytes_of("PK\x03\x04 a zip file"), {"bad magic"}));
}

TEST(Npy, RejectsUnsupportedVersions) {
  auto file = npy_file(dict("<f4", "(1,)"), zeros(4));
  file[6] = 4;
  EXPECT_TRUE(parse_fails(file, {"version 4.0"}));
  file[6] = 1;
  file[7] = 1;
  EXPECT_TRUE(parse_fails(file, {"version 1.1"}));
}

TEST(Npy, RejectsTruncatedHeaders) {
  EXPECT_TRUE(parse_fails(bytes_of("\x93NUMPY\x01"), {"truncated header", "version"}));
  EXPECT_TRUE(parse_fails(bytes_of(std::string("\x93NUMPY\x02\x00\x10\x00", 10)),
                          {"truncated header", "header length"}));
  auto file = npy_file(dict("<f4", "(1,)"), zeros(4));
  file.resize(30);  // inside the dict
  EXPECT_TRUE(parse_fails(file, {"truncated header", "exceeds"}));
}

TEST(Npy, RejectsHeaderLengthBeyondTheFile) {
  auto file = npy_file(dict("<f4", "(1,)"), zeros(4));
  file[8] = 0xff;
  file[9] = 0xff;
  EXPECT_TRUE(parse_fails(file, {"header length 65535 exceeds"}));
}

TEST(Npy, RejectsUnterminatedSyntax) {
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "),
                          {"unterminated dict"}));
  EXPECT_TRUE(
      parse_fails(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)"), {"unterminated dict"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4"), {"unterminated string"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3"),
                          {"unterminated shape"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4' 'fortran_order': False}"), {"expected ',' or '}'"}));
  EXPECT_TRUE(parse_fails(npy_file("['descr', '<f4']"), {"expected '{'"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(1,)") + " x", zeros(4)), {"after the closing '}'"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<\\x66', 'fortran_order': False, 'shape': ()}"), {"escape"}));
}

TEST(Npy, RejectsMissingDuplicateAndUnknownKeys) {
  EXPECT_TRUE(
      parse_fails(npy_file("{'fortran_order': False, 'shape': (1,)}", zeros(4)), {"missing key 'descr'"}));
  EXPECT_TRUE(
      parse_fails(npy_file("{'descr': '<f4', 'shape': (1,)}", zeros(4)), {"missing key 'fortran_order'"}));
  EXPECT_TRUE(
      parse_fails(npy_file("{'descr': '<f4', 'fortran_order': False}", zeros(4)), {"missing key 'shape'"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}"),
                          {"duplicate key 'descr'"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}"),
                          {"unexpected key 'x'"}));
}

TEST(Npy, RejectsUnknownDescrs) {
  EXPECT_TRUE(parse_fails(npy_file(dict("<f8", "(1,)"), zeros(8)), {"unsupported descr '<f8'"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<i4", "(1,)"), zeros(4)), {"unsupported descr '<i4'"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<V2", "(1,)"), zeros(2)), {"'<V2'", "ambiguous", "'bfloat16'"}));
  EXPECT_TRUE(parse_fails(npy_file(dict(">f4", "(1,)"), zeros(4)), {"big-endian"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': ()}"),
                          {"quoted string for the 'descr' value"}));
}

TEST(Npy, RejectsFortranOrder) {
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", zeros(16)),
                          {"fortran_order is True", "C-ordered"}));
  EXPECT_TRUE(parse_fails(npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (), }", zeros(4)),
                          {"True or False"}));
}

TEST(Npy, RejectsBadDimensions) {
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(2, -3)")), {"negative dimension"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(99999999999999999999,)")), {"dimension too large"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(2.5,)")), {"expected ',' or ')'"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(3)")), {"not a tuple"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(1, 1, 1, 1, 1, 1, 1, 1, 1)")), {"more than 8 dimensions"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "3")), {"'shape' value (a tuple)"}));
}

TEST(Npy, RejectsElementAndByteCountOverflow) {
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(4294967296, 4294967296)")), {"element count", "overflows"}));
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(9223372036854775807,)")), {"byte size", "overflows"}));
}

TEST(Npy, RejectsALyingShapeWithoutAllocatingIt) {
  // 4 TB claimed, 8 bytes present: the size check must come before any allocation.
  EXPECT_TRUE(parse_fails(npy_file(dict("<f4", "(1000000, 1000000)"), zeros(8)),
                          {"truncated data", "4000000000000", "has 8"}));
}

TEST(Npy, TruncatedAndExtraDataNameTheFileAndTheByteCounts) {
  TempDir dir;
  const std::string path = dir.file("short.npy");
  write_npy(path, random_tensor(DType::f32, {2, 3}, 9));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  EXPECT_TRUE(throws_error([&] { read_npy(path); }, path, {"truncated data", "needs 24", "has 20"}));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) + 7);
  EXPECT_TRUE(throws_error([&] { read_npy(path); }, path, {"extra data", "needs 24", "has 27"}));
}

TEST(Npy, FileErrorsNameThePath) {
  TempDir dir;
  const std::string missing = dir.file("missing.npy");
  EXPECT_TRUE(throws_error([&] { read_npy(missing); }, missing, {"cannot open"}));
  EXPECT_TRUE(throws_error([&] { read_npy(dir.path()); }, dir.path(), {"directory"}));
  pasa::test::expect_error([] { read_npy(""); }, "input path is empty");
  pasa::test::expect_error([] { read_safetensors(""); }, "input path is empty");
  const std::string no_dir = dir.file("no/such/dir.npy");
  EXPECT_TRUE(throws_error([&] { write_npy(no_dir, random_tensor(DType::f32, {1}, 1)); }, no_dir,
                           {"cannot open for writing"}));
  if (std::filesystem::exists("/dev/full")) {
    EXPECT_TRUE(throws_error([&] { write_npy("/dev/full", random_tensor(DType::f32, {64}, 1)); }, "/dev/full",
                             {"write failed"}));
  }
}

// The system calls take a name only up to a NUL: "notes.txt\0.npy" was read as, and written over,
// notes.txt. Every reader and writer refuses such a path, showing the NUL, and touches no file.
TEST(Npy, APathWithANulIsRefusedNotCut) {
  TempDir dir;
  const std::string notes = dir.file("notes.txt");
  std::ofstream(notes) << "keep";
  const std::string cut = notes + std::string("\0.npy", 5);
  const std::string shown = "'" + notes + "\\x00.npy' contains a NUL character";
  const HostTensor t = random_tensor(DType::f32, {2}, 1);
  pasa::test::expect_error([&] { write_npy(cut, t); }, "output path " + shown);
  pasa::test::expect_error([&] { write_safetensors(cut, {{"t", t}}); }, "output path " + shown);
  pasa::test::expect_error([&] { read_npy(cut); }, "input path " + shown);
  pasa::test::expect_error([&] { read_safetensors(cut); }, "input path " + shown);
  std::ifstream in(notes);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);  // no temporary left
}

// The path is checked before the tensor: an error about the tensor names the path, and its message
// would end at the NUL, without the part that says what is wrong.
TEST(Npy, APathWithANulIsRefusedBeforeTheTensorIsChecked) {
  TempDir dir;
  const std::string cut = dir.file("notes.txt") + std::string("\0.npy", 5);
  const std::string shown = "output path '" + dir.file("notes.txt") + "\\x00.npy' contains a NUL character";
  HostTensor short_bytes = random_tensor(DType::f32, {2}, 1);
  short_bytes.bytes.pop_back();
  for (const HostTensor& t : {HostTensor{}, short_bytes}) {
    pasa::test::expect_error([&] { write_npy(cut, t); }, shown);
    pasa::test::expect_error([&] { write_safetensors(cut, {{"t", t}}); }, shown);
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0);
}

TEST(Npy, APipeIsRefusedAtOnceNotWaitedOn) {
  // Opening a FIFO for reading waits for a writer; the reader must refuse it without opening it so.
  TempDir dir;
  const std::string fifo = dir.file("fifo.npy");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(throws_error([&] { read_npy(fifo); }, fifo, {"is not a regular file"}));
  EXPECT_TRUE(throws_error([&] { read_safetensors(fifo); }, fifo, {"is not a regular file"}));
}

TEST(Npy, WriteRejectsInconsistentTensors) {
  TempDir dir;
  const std::string path = dir.file("bad.npy");
  HostTensor t = random_tensor(DType::f16, {2, 3}, 1);
  t.bytes.pop_back();
  const auto write = [&path](const HostTensor& tensor) {
    return [&path, tensor] { write_npy(path, tensor); };
  };
  EXPECT_TRUE(throws_error(write(t), path, {"holds 11 bytes", "needs 12"}));
  EXPECT_TRUE(throws_error(write(HostTensor{DType::f32, {2, -1}, {}}), path, {"negative dimension"}));
  const HostTensor rank9{DType::f32, std::vector<std::int64_t>(9, 1), {}};
  EXPECT_TRUE(throws_error(write(rank9), path, {"rank 9 exceeds"}));
  // A dtype outside the enum names the file, not an internal function ("descr_of: unknown dtype").
  const HostTensor bad_dtype{static_cast<DType>(9), {1}, std::vector<std::uint8_t>(4)};
  EXPECT_TRUE(throws_error(write(bad_dtype), path, {"unsupported dtype (code 9)"}));
  EXPECT_TRUE(throws_error([&] { write_safetensors(path, {{"o", bad_dtype}}); }, path, {"unsupported dtype (code 9)"}));
}

}  // namespace
}  // namespace pasa::io::test
