#include "io/byte_io.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "pasa/error.h"

namespace pasa::io::detail {

namespace {

std::string errno_text() { return errno != 0 ? std::string(" (") + std::strerror(errno) + ")" : ""; }

}  // namespace

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::error_code ec;
  // An ifstream opens a directory without complaint on Linux and then fails in odd ways.
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": is a directory, not a file");
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading" + errno_text());
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (!in || size < 0) throw Error(path + ": cannot determine the file size");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (in.gcount() != size) {
    throw Error(path + ": read " + std::to_string(in.gcount()) + " of " + std::to_string(size) +
                " bytes" + errno_text());
  }
  return bytes;
}

void write_file(const std::string& path, std::span<const std::span<const std::uint8_t>> pieces) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path + ": cannot open for writing" + errno_text());
  for (const auto piece : pieces) {
    out.write(reinterpret_cast<const char*>(piece.data()), static_cast<std::streamsize>(piece.size()));
  }
  // Buffered writes (a full disk, a quota) only fail at the final flush, so check after close.
  out.close();
  if (!out) throw Error(path + ": write failed" + errno_text());
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string quoted(std::string_view text) {
  constexpr std::size_t kMaxShown = 48;
  std::string out = "'";
  for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (text.size() > kMaxShown) out += "...";
  return out + "'";
}

std::size_t checked_nbytes(std::span<const std::int64_t> shape, DType dtype, const std::string& what) {
  if (shape.size() > kMaxRank) {
    throw Error(what + ": rank " + std::to_string(shape.size()) + " exceeds the maximum of " +
                std::to_string(kMaxRank));
  }
  // The limit is int64 max (not size_t max) so numel() and byte offsets stay representable as
  // std::int64_t everywhere downstream.
  constexpr auto kLimit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t numel = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) throw Error(what + ": negative dimension in shape " + shape_text(shape));
    if (d != 0 && numel > kLimit / static_cast<std::uint64_t>(d)) {
      throw Error(what + ": element count of shape " + shape_text(shape) + " overflows 63 bits");
    }
    numel *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t itemsize = dtype_size(dtype);
  if (numel > kLimit / itemsize) {
    throw Error(what + ": byte size of shape " + shape_text(shape) + " (" + dtype_name(dtype) +
                ") overflows 63 bits");
  }
  return static_cast<std::size_t>(numel * itemsize);
}

}  // namespace pasa::io::detail
