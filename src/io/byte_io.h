// SPDX-License-Identifier: Apache-2.0
// io/byte_io.h — what the .npy and .safetensors readers and writers share: reads of exact byte ranges
// of a file that report failures as pasa::Error naming the path, the overflow-checked byte size of a
// tensor, and quoting of untrusted text for error messages. (Writes: io/atomic_file.h.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pasa/tensor.h"

namespace pasa::io::detail {

// No attention tensor needs more; a larger rank in an untrusted file is treated as corruption.
inline constexpr std::size_t kMaxRank = 8;

// A file opened for reading. The readers parse the header first and compare the sizes it declares
// with size() before reading (and allocating for) the data, so a huge file that is not what its name
// says is rejected after a few bytes.
class InputFile {
 public:
  explicit InputFile(const std::string& path);  // throws pasa::Error: missing, a directory, unreadable
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  std::uint64_t size() const { return size_; }
  // Bytes [offset, offset + count); throws pasa::Error when the file is shorter or a read fails, and
  // pasa::ResourceError when the buffer does not fit in the memory available.
  std::vector<std::uint8_t> read(std::uint64_t offset, std::uint64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// Throws pasa::Error naming the path when it cannot name a file: empty, or holding a NUL character
// (the system calls take the name only up to it, so "notes.txt\0.npy" would open notes.txt). `role`,
// "input" or "output", says which path of the call it is.
void check_path(const std::string& path, const char* role);

// "[2, 3]".
std::string shape_text(std::span<const std::int64_t> shape);

// Untrusted text for a message: single-quoted, non-printable bytes as \xNN, cut after a few dozen
// characters so a hostile header cannot blow up the message.
std::string quoted(std::string_view text);

// numel * dtype_size of a C-ordered tensor. Throws pasa::Error starting with `what` when the rank is
// above kMaxRank, a dimension is negative, or the element or byte count does not fit in 63 bits.
std::size_t checked_nbytes(std::span<const std::int64_t> shape, DType dtype, const std::string& what);

}  // namespace pasa::io::detail
