// io/byte_io.h — what the .npy and .safetensors readers and writers share: whole-file reads and writes
// that report failures as pasa::Error naming the path, the overflow-checked byte size of a tensor, and
// quoting of untrusted text for error messages.
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

std::vector<std::uint8_t> read_file(const std::string& path);
void write_file(const std::string& path, std::span<const std::span<const std::uint8_t>> pieces);

inline std::span<const std::uint8_t> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

// "[2, 3]".
std::string shape_text(std::span<const std::int64_t> shape);

// Untrusted text for a message: single-quoted, non-printable bytes as \xNN, cut after a few dozen
// characters so a hostile header cannot blow up the message.
std::string quoted(std::string_view text);

// numel * dtype_size of a C-ordered tensor. Throws pasa::Error starting with `what` when the rank is
// above kMaxRank, a dimension is negative, or the element or byte count does not fit in 63 bits.
std::size_t checked_nbytes(std::span<const std::int64_t> shape, DType dtype, const std::string& what);

}  // namespace pasa::io::detail
