// SPDX-License-Identifier: Apache-2.0
#include "io/byte_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "memory_budget.h"
#include "pasa/error.h"

namespace pasa::io::detail {

namespace {

std::string errno_text(int err) { return std::string(" (") + std::strerror(err) + ")"; }

}  // namespace

void check_path(const std::string& path, const char* role) {
  if (path.empty()) throw Error(std::string(role) + " path is empty");  // else the message would name nothing
  if (path.find('\0') == std::string::npos) return;
  std::string shown;  // the whole path, its NULs visible
  for (const char c : path) shown += c == '\0' ? std::string("\\x00") : std::string(1, c);
  throw Error(std::string(role) + " path '" + shown + "' contains a NUL character, which no file name can hold");
}

InputFile::InputFile(const std::string& path) : path_(path) {
  check_path(path, "input");
  // Refused before it is opened: a FIFO's open would wait for a writer (forever if none comes), and
  // opening some devices has effects of their own. fstat below checks the opened file again (it may
  // have been replaced in between). The open itself blocks as usual, so a regular file under a lease
  // (SMB, NFS delegations) is waited for rather than refused.
  struct stat named {};
  if (::stat(path.c_str(), &named) == 0 && !S_ISREG(named.st_mode) && !S_ISDIR(named.st_mode)) {
    throw Error(path + ": is not a regular file (the readers need its size before reading)");
  }
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(path + ": cannot open for reading" + errno_text(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(path + ": cannot determine the file size" + errno_text(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw Error(path + ": is a directory, not a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(path + ": is not a regular file (the readers need its size before reading)");
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

std::vector<std::uint8_t> InputFile::read(std::uint64_t offset, std::uint64_t count) const {
  if (offset > size_ || count > size_ - offset) {
    throw Error(path_ + ": truncated: bytes [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                ") lie beyond the file's " + std::to_string(size_) + " bytes");
  }
  require_memory(count, path_ + ": reading " + std::to_string(count) + " bytes");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(count));
  std::uint64_t done = 0;
  while (done < count) {
    const ssize_t n = ::pread(fd_, bytes.data() + done, static_cast<std::size_t>(count - done),
                              static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(path_ + ": read failed" + errno_text(errno));
    if (n == 0) {
      throw Error(path_ + ": the file shrank while it was read (" + std::to_string(offset + done) + " of " +
                  std::to_string(size_) + " bytes)");
    }
    done += static_cast<std::uint64_t>(n);
  }
  return bytes;
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
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) > static_cast<int>(DType::bf16)) {
    throw Error(what + ": unsupported dtype (code " + std::to_string(static_cast<int>(dtype)) +
                "); use f32, f16 or bf16");
  }
  if (shape.size() > kMaxRank) {
    throw Error(what + ": rank " + std::to_string(shape.size()) + " exceeds the maximum of " +
                std::to_string(kMaxRank));
  }
  // The limit is int64 max (not size_t max) so numel() and byte offsets stay representable as
  // std::int64_t everywhere downstream.
  constexpr auto kLimit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  // The nonzero dimensions' product is held to the limit even where a zero dimension makes the
  // array empty: NumPy (and so the Python package's arrays) refuses such shapes too.
  const bool empty = std::find(shape.begin(), shape.end(), std::int64_t{0}) != shape.end();
  std::uint64_t nonzero = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) throw Error(what + ": negative dimension in shape " + shape_text(shape));
    if (d == 0) continue;
    if (nonzero > kLimit / static_cast<std::uint64_t>(d)) {
      throw Error(what + ": element count of shape " + shape_text(shape) + " overflows 63 bits" +
                  (empty ? std::string(" (its nonzero dimensions')") : std::string()));
    }
    nonzero *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t numel = empty ? 0 : nonzero;
  const std::uint64_t itemsize = dtype_size(dtype);
  if (nonzero > kLimit / itemsize) {
    throw Error(what + ": byte size of shape " + shape_text(shape) + " (" + dtype_name(dtype) +
                ") overflows 63 bits");
  }
  return static_cast<std::size_t>(numel * itemsize);
}

}  // namespace pasa::io::detail
