// SPDX-License-Identifier: Apache-2.0
// Writing files so that each is either fully replaced or not touched at all.
//
// The bytes go to a temporary file in the destination's directory (same filesystem, so the final
// rename is atomic); every write, the fsync and the close are checked; only then is the temporary
// renamed over the destination. On any failure (full disk, quota, I/O error) the temporary is removed
// and the old file is intact. While a write is in progress, SIGINT and SIGTERM (where the process has
// left them at their default action, as the CLI does) remove the temporary before the process dies;
// a child forked meanwhile starts with the handlers the write found and none of its temporaries, and
// a handler the program installs meanwhile is kept when the write ends.
//
// A symbolic link is followed, also when it dangles: its final target is written (created if
// missing) and the link kept. A destination that exists and is not a regular file (a pipe,
// /dev/full) cannot be replaced by a rename; it is written in place, still checking every write. The
// process's own descriptors (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N) are written through
// the descriptor itself, whatever it is open on: a shell's `>> log` keeps the log's contents and
// appends, where replacing the file behind it would lose them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pasa::io::detail {

// A file's contents as the writers produce them: a head they own (a format's header, or a whole text)
// followed by data they borrow (tensors' bytes, which must stay alive until the file is written).
struct FileBytes {
  std::string head;
  std::vector<std::span<const std::uint8_t>> data;
};

// The descriptor that `path` names in this process (1 for /dev/stdout, 2 for /dev/stderr, N for
// /dev/fd/N and /proc/self/fd/N), or -1 for any other path.
int own_descriptor(const std::string& path);

// The file a write to `path` replaces: `path` itself, or where its chain of symbolic links ends.
// Throws pasa::Error naming the path when it is empty, the links loop, or a link's target lies in a
// directory that does not exist (the link and the target both named).
std::string resolve_output_path(const std::string& path);

// Throws pasa::Error naming the path when a write to it could not start: the path (or the file its
// links lead to) is a directory or lies in a missing directory, a device cannot be written, or the
// temporary file cannot be created next to it. The temporary is really created and removed here, as
// the write will create it, so read-only places (/proc, /sys) are refused before any work is done.
void check_output_path(const std::string& path);

// Throws pasa::Error naming the path when the destination cannot be opened (pasa::ResourceError when
// that is for want of space, inodes or descriptors), and pasa::ResourceError when a write, the flush or
// the rename fails.
void write_file_atomically(const std::string& path, FileBytes bytes);
void write_text_atomically(const std::string& path, std::string_view text);

// Several files that change together (a command's outputs): add() writes each regular destination's
// temporary at once; commit() then writes the destinations that are not regular files in place and
// renames every temporary over its destination. A failure before commit's renames (a full disk, a
// device that refuses the bytes) leaves every regular destination as it was; a batch destroyed without
// commit() removes its temporaries. A rename that fails (an append-only file, a bind mount, an I/O
// error) puts back the files renamed before it, which commit kept under hard links; only a file that
// takes no link and is not the last renamed (two such files in one batch) can stay replaced, and the
// error names it.
class FileBatch {
 public:
  FileBatch();
  ~FileBatch();
  FileBatch(const FileBatch&) = delete;
  FileBatch& operator=(const FileBatch&) = delete;

  // Errors as write_file_atomically's. The bytes of a destination written in place are kept (their
  // borrowed data must stay alive) until commit().
  void add(const std::string& path, FileBytes bytes);
  void commit();

 private:
  struct Entry;
  std::vector<std::unique_ptr<Entry>> entries_;
};

// Unlinks every temporary file a write in progress holds, then removes each FolderRemovedOnSignal's
// folder if it is empty. Async-signal-safe: what the signal handler calls, exposed for tests.
void remove_pending_temporaries() noexcept;

// A folder made for a command's outputs before its long work: for this object's lifetime the signals
// that end the process (those a write handles, over their default actions) first remove it if it is
// still empty, as they remove a write's temporaries; what is in it is never removed.
class FolderRemovedOnSignal {
 public:
  explicit FolderRemovedOnSignal(const std::string& path);
  ~FolderRemovedOnSignal();
  FolderRemovedOnSignal(const FolderRemovedOnSignal&) = delete;
  FolderRemovedOnSignal& operator=(const FolderRemovedOnSignal&) = delete;

 private:
  void* slot_ = nullptr;  // (its registration; none where every slot is taken)
};

// Whether handler is the one those signals run while a write or a FolderRemovedOnSignal is pending (a
// handler of the command's own may stand in for it, and must put it back).
bool is_cleanup_handler(void (*handler)(int)) noexcept;

}  // namespace pasa::io::detail
