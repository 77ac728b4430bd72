// SPDX-License-Identifier: Apache-2.0
// .npy files (numpy's format, versions 1.0, 2.0 and 3.0): a magic string, a version, a little-endian
// header length, a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...)} padded with
// spaces and a newline, then the raw C-ordered data.
//
// dtypes: '<f4' is f32 and '<f2' is f16, as numpy writes them. numpy has no bfloat16; ml_dtypes arrays
// are saved by np.save with descr '<V2', an untyped 2-byte void that could hold anything, so that descr
// is rejected. pasa writes and reads bf16 with descr 'bfloat16' instead: the name ml_dtypes registers
// with numpy, so np.load reads these files as bfloat16 once ml_dtypes is imported.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/atomic_file.h"
#include "io/byte_io.h"
#include "io/tensor_bytes.h"
#include "pasa/error.h"
#include "pasa/io.h"

namespace pasa::io {

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kDataAlign = 64;  // numpy's alignment of the data start (for mmap and SIMD)
// Far above any real header (a rank-8 shape with 19-digit dimensions needs a few hundred bytes), and
// the bound on what a hostile header length makes the reader allocate.
constexpr std::size_t kMaxHeader = 1 << 20;

struct NpyLayout {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::size_t data_offset = 0;
};

std::string descr_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return "bfloat16";
  }
  throw Error("descr_of: unknown dtype");
}

// The subset of Python literal syntax numpy writes in headers: one dict of the three keys in any order,
// string, bool and int-tuple values, optional trailing commas, any whitespace. Every access is checked
// against the end of the text.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  NpyLayout parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran_order;
    std::optional<std::vector<std::int64_t>> shape;
    skip_space();
    expect('{', "the header dict");
    skip_space();
    while (!at('}')) {
      if (at_end()) fail("unterminated dict (no closing '}')");
      const std::string key = parse_string("a dict key");
      skip_space();
      expect(':', "after the key " + detail::quoted(key));
      skip_space();
      if (key == "descr") {
        set_once(descr, parse_string("the 'descr' value"), key);
      } else if (key == "fortran_order") {
        set_once(fortran_order, parse_bool(), key);
      } else if (key == "shape") {
        set_once(shape, parse_shape(), key);
      } else {
        fail("unexpected key " + detail::quoted(key) + " (expected 'descr', 'fortran_order', 'shape')");
      }
      skip_space();
      if (at(',')) {
        ++pos_;
        skip_space();
      } else if (!at('}')) {
        fail(at_end() ? "unterminated dict (no closing '}')" : "expected ',' or '}' after a value");
      }
    }
    ++pos_;
    skip_space();
    if (!at_end()) fail("unexpected text after the closing '}'");
    if (!descr) fail("missing key 'descr'");
    if (!fortran_order) fail("missing key 'fortran_order'");
    if (!shape) fail("missing key 'shape'");
    if (*fortran_order) {
      throw Error(source_ + ": fortran_order is True; only C-ordered arrays are supported "
                            "(save np.ascontiguousarray(a))");
    }
    return NpyLayout{dtype_of(*descr), std::move(*shape), 0};
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source_ + ": bad .npy header: " + what + " (at header byte " + std::to_string(pos_) + ")");
  }

  bool at_end() const { return pos_ >= text_.size(); }
  bool at(char c) const { return !at_end() && text_[pos_] == c; }
  bool at_digit() const { return !at_end() && text_[pos_] >= '0' && text_[pos_] <= '9'; }

  void skip_space() {
    while (at(' ') || at('\t') || at('\n') || at('\r')) ++pos_;
  }

  void expect(char c, const std::string& where) {
    if (!at(c)) fail(std::string("expected '") + c + "' in " + where);
    ++pos_;
  }

  template <typename T>
  void set_once(std::optional<T>& slot, T value, const std::string& key) {
    if (slot) fail("duplicate key '" + key + "'");
    slot = std::move(value);
  }

  std::string parse_string(const std::string& what) {
    if (!at('\'') && !at('"')) fail("expected a quoted string for " + what);
    const char quote = text_[pos_++];
    const std::size_t begin = pos_;
    while (!at_end() && text_[pos_] != quote) {
      // No key or descr numpy writes needs escapes; refusing them keeps the parser a plain scan.
      if (text_[pos_] == '\\') fail("escape sequences are not supported in strings");
      ++pos_;
    }
    if (at_end()) fail("unterminated string for " + what);
    return std::string(text_.substr(begin, pos_++ - begin));
  }

  bool parse_bool() {
    for (const bool value : {true, false}) {
      const std::string_view word = value ? "True" : "False";
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("expected True or False for 'fortran_order'");
  }

  std::vector<std::int64_t> parse_shape() {
    expect('(', "the 'shape' value (a tuple)");
    std::vector<std::int64_t> dims;
    bool trailing_comma = false;
    skip_space();
    while (!at(')')) {
      if (at_end()) fail("unterminated shape tuple");
      if (dims.size() == detail::kMaxRank) {
        fail("shape has more than " + std::to_string(detail::kMaxRank) + " dimensions");
      }
      dims.push_back(parse_dim());
      skip_space();
      trailing_comma = at(',');
      if (trailing_comma) {
        ++pos_;
        skip_space();
      } else if (!at(')')) {
        fail(at_end() ? "unterminated shape tuple" : "expected ',' or ')' in the shape tuple");
      }
    }
    ++pos_;
    // In Python "(3)" is the integer 3, not a tuple; numpy itself rejects it.
    if (dims.size() == 1 && !trailing_comma) fail("shape (N) is not a tuple; a 1-tuple is written (N,)");
    return dims;
  }

  std::int64_t parse_dim() {
    if (at('-')) fail("negative dimension in the shape");
    if (!at_digit()) fail("expected a non-negative integer dimension in the shape");
    std::int64_t value = 0;
    while (at_digit()) {
      const int digit = text_[pos_] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        fail("dimension too large (does not fit in 63 bits)");
      }
      value = value * 10 + digit;
      ++pos_;
    }
    return value;
  }

  DType dtype_of(const std::string& descr) const {
    if (descr == "<f4") return DType::f32;
    if (descr == "<f2") return DType::f16;
    if (descr == "bfloat16") return DType::bf16;
    if (descr == "<V2" || descr == "|V2") {
      throw Error(source_ + ": descr " + detail::quoted(descr) +
                  " is an untyped 2-byte void (how np.save stores ml_dtypes bfloat16), which is "
                  "ambiguous; store bf16 as .safetensors, or as .npy with descr 'bfloat16'");
    }
    if (descr == ">f4" || descr == ">f2") {
      throw Error(source_ + ": big-endian descr " + detail::quoted(descr) +
                  " is not supported (save a.astype(a.dtype.newbyteorder('<')))");
    }
    throw Error(source_ + ": unsupported descr " + detail::quoted(descr) +
                " (supported: '<f4', '<f2', 'bfloat16')");
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t pos_ = 0;
};

// The end of the header (preamble + header length) from the first bytes of a file of `file_size`
// bytes; `bytes` holds at least its first min(file_size, 12) bytes.
std::size_t header_end(std::span<const std::uint8_t> bytes, std::uint64_t file_size, const std::string& source) {
  if (file_size < kMagic.size() || std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    throw Error(source + ": not a .npy file (bad magic: expected \\x93NUMPY)");
  }
  if (file_size < kMagic.size() + 2) {
    throw Error(source + ": truncated header: the file ends in the version");
  }
  const int major = bytes[6];
  const int minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    throw Error(source + ": unsupported .npy format version " + std::to_string(major) + "." +
                std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  }
  // 1.0 has a 2-byte header length; 2.0 widened it to 4 bytes; 3.0 only allows UTF-8 in the header.
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  const std::size_t preamble = 8 + length_bytes;
  if (file_size < preamble) {
    throw Error(source + ": truncated header: the file ends in the header length");
  }
  std::size_t header_length = 0;
  for (std::size_t i = 0; i < length_bytes; ++i) header_length |= std::size_t{bytes[8 + i]} << (8 * i);
  if (header_length > kMaxHeader) {
    throw Error(source + ": header length " + std::to_string(header_length) + " exceeds the " +
                std::to_string(kMaxHeader) + " bytes a header of at most " + std::to_string(detail::kMaxRank) +
                " dimensions can need");
  }
  if (header_length > file_size - preamble) {
    throw Error(source + ": truncated header: header length " + std::to_string(header_length) +
                " exceeds the " + std::to_string(file_size - preamble) + " bytes after the preamble");
  }
  return preamble + header_length;
}

// Validates everything but the data, which must follow the header and fill the rest of the file's
// `file_size` bytes exactly. `bytes` holds at least the whole header (header_end bytes).
NpyLayout parse_layout(std::span<const std::uint8_t> bytes, std::uint64_t file_size, const std::string& source) {
  const std::size_t end = header_end(bytes, file_size, source);
  const std::size_t preamble = bytes[6] == 1 ? 10 : 12;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + preamble), end - preamble);
  NpyLayout layout = HeaderParser(text, source).parse();
  layout.data_offset = end;
  const std::size_t expected = detail::checked_nbytes(layout.shape, layout.dtype, source);
  const std::uint64_t actual = file_size - layout.data_offset;
  if (actual != expected) {
    const std::string counts = "the header's shape " + detail::shape_text(layout.shape) + " (" +
                               dtype_name(layout.dtype) + ") needs " + std::to_string(expected) +
                               " data bytes, the file has " + std::to_string(actual);
    throw Error(source + (actual < expected ? ": truncated data: " : ": extra data after the array: ") +
                counts);
  }
  return layout;
}

}  // namespace

HostTensor parse_npy(std::span<const std::uint8_t> bytes, const std::string& source) {
  NpyLayout layout = parse_layout(bytes, bytes.size(), source);
  const auto data = bytes.subspan(layout.data_offset);
  return HostTensor{layout.dtype, std::move(layout.shape), {data.begin(), data.end()}};
}

HostTensor read_npy(const std::string& path) {
  const detail::InputFile file(path);
  constexpr std::uint64_t kLongestPreamble = 12;
  const std::size_t end = header_end(file.read(0, std::min(file.size(), kLongestPreamble)), file.size(), path);
  NpyLayout layout = parse_layout(file.read(0, end), file.size(), path);
  return HostTensor{layout.dtype, std::move(layout.shape), file.read(end, file.size() - end)};
}

namespace detail {

FileBytes npy_bytes(const std::string& path, const HostTensor& tensor) {
  check_path(path, "output");  // first: any other message names the path, and would end at its NUL
  const std::size_t nbytes = checked_nbytes(tensor.shape, tensor.dtype, path);
  if (tensor.bytes.size() != nbytes) {
    throw Error(path + ": tensor holds " + std::to_string(tensor.bytes.size()) + " bytes but shape " +
                shape_text(tensor.shape) + " (" + dtype_name(tensor.dtype) + ") needs " + std::to_string(nbytes));
  }
  // Byte-for-byte what np.save writes. With rank <= kMaxRank the dict stays far below version 1.0's
  // 64 KiB header limit, so 1.0 always suffices.
  std::string shape = "(";
  for (std::size_t i = 0; i < tensor.shape.size(); ++i) {
    shape += (i > 0 ? ", " : "") + std::to_string(tensor.shape[i]);
  }
  shape += tensor.shape.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + descr_of(tensor.dtype) + "', 'fortran_order': False, 'shape': " +
                       shape + ", }";
  constexpr std::size_t kPreamble = 10;
  const std::size_t unpadded = kPreamble + header.size() + 1;  // + the closing newline
  header.append((kDataAlign - unpadded % kDataAlign) % kDataAlign, ' ');
  header += '\n';
  const char preamble[kPreamble] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(header.size() & 0xff),
                                    static_cast<char>(header.size() >> 8)};
  return FileBytes{std::string(preamble, kPreamble) + header, {tensor.bytes}};
}

}  // namespace detail

void write_npy(const std::string& path, const HostTensor& tensor) {
  detail::write_file_atomically(path, detail::npy_bytes(path, tensor));
}

}  // namespace pasa::io
