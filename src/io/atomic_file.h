// SPDX-License-Identifier: Apache-2.0
// Writing a file so that it is either fully replaced or not touched at all.
//
// The bytes go to a temporary file in the destination's directory (same filesystem, so the final
// rename is atomic); every write, the fsync and the close are checked; only then is the temporary
// renamed over the destination. On any failure (full disk, quota, I/O error) the temporary is removed
// and the old file is intact. While a write is in progress, SIGINT and SIGTERM (where the process has
// left them at their default action, as the CLI does) remove the temporary before the process dies.
//
// A destination that exists and is not a regular file (/dev/stdout, a pipe, /dev/full) cannot be
// replaced by a rename; it is written in place, still checking every write.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pasa::io::detail {

// Throws pasa::Error naming the path when the destination cannot be opened, and
// pasa::ResourceError when a write, the flush or the rename fails.
void write_file_atomically(const std::string& path, std::span<const std::span<const std::uint8_t>> pieces);
void write_text_atomically(const std::string& path, std::string_view text);

// Unlinks every temporary file a write in progress holds. Async-signal-safe: what the signal handler
// calls, exposed for tests.
void remove_pending_temporaries() noexcept;

}  // namespace pasa::io::detail
