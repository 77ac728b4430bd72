// SPDX-License-Identifier: Apache-2.0
#include "output_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "io/atomic_file.h"
#include "pasa/error.h"
#include "text/format.h"

namespace pasa::cli {
namespace {

namespace fs = std::filesystem;

// What identifies a file: device and inode when it exists; otherwise the canonical form of the path it
// will be created at (its directory resolved, so "a/../b.npy" and "b.npy" agree; a dangling symbolic
// link followed, so it and its target agree).
struct FileIdentity {
  std::optional<std::pair<dev_t, ino_t>> inode;
  std::string future_path;
  bool operator==(const FileIdentity& o) const {
    return inode ? inode == o.inode : !o.inode && future_path == o.future_path;
  }
};

// Whether descriptor `fd` is open on the file `id` names.
bool is_open_on(const FileIdentity& id, int fd) {
  struct stat st {};
  return id.inode && ::fstat(fd, &st) == 0 && *id.inode == std::pair{st.st_dev, st.st_ino};
}

FileIdentity identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return {std::pair{st.st_dev, st.st_ino}, {}};
  std::string target = path;
  try {
    target = io::detail::resolve_output_path(path);
  } catch (const Error&) {
    // A link that cannot be followed: check_writable refuses it as an output; as an input it fails
    // to open. Either way its own spelling is as good an identity as any.
  }
  std::error_code ec;
  const fs::path p(target);
  const fs::path dir = fs::weakly_canonical(p.has_parent_path() ? p.parent_path() : fs::path("."), ec);
  return {std::nullopt, (dir / p.filename()).string()};
}

void check_writable(const NamedPath& out) {
  const fs::path p(out.path);
  std::error_code ec;
  const std::string where = out.option + ": " + out.path;
  if (fs::is_directory(p, ec)) throw Error(where + " is a directory; give a file name");
  if (!p.has_filename()) throw Error(where + " names no file");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec)) {
    throw Error(where + ": " + dir.string() + (fs::exists(dir, ec) ? " is not a directory" : " does not exist"));
  }
  // What access() cannot tell (it says yes to root everywhere, and knows nothing of /proc or /sys):
  // whether the write's temporary file can really be created there, where a symbolic link leads, and
  // whether a descriptor of this process (/dev/fd/N) was opened for writing.
  const auto check_the_write = [&] {
    try {
      io::detail::check_output_path(out.path);
    } catch (const Error& e) {
      throw Error(out.option + ": " + e.what());
    }
  };
  // One of this process's descriptors (/dev/stdout, /dev/fd/N) is written through the descriptor,
  // whatever file it holds: neither the file nor its directory is opened.
  if (io::detail::own_descriptor(out.path) >= 0) return check_the_write();
  if (fs::exists(p, ec)) {
    if (::access(out.path.c_str(), W_OK) != 0) {
      throw Error(where + ": cannot be written (" + std::strerror(errno) + ")");
    }
    struct stat st {};
    // A regular file is replaced through a temporary in its directory, which must be writable too;
    // anything else is written in place.
    if (::stat(out.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return check_the_write();
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw Error(where + ": the directory " + dir.string() + " is not writable (" + std::strerror(errno) + ")");
  }
  check_the_write();
}

}  // namespace

void check_output_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs) {
  std::vector<std::pair<const NamedPath*, FileIdentity>> seen;
  for (const NamedPath& in : inputs) {
    if (!in.path.empty()) seen.emplace_back(&in, identity_of(in.path));
  }
  for (const NamedPath& out : outputs) {
    if (out.path.empty()) continue;
    check_writable(out);
    const FileIdentity id = identity_of(out.path);
    for (const auto& [other, other_id] : seen) {
      if (other_id == id) {
        throw Error(out.option + ": " + out.path + " is the same file as " + other->option + " " + other->path +
                    "; writing it would overwrite that (choose another path)");
      }
    }
    seen.emplace_back(&out, id);
  }
  route_around_outputs(outputs);
}

void route_around_outputs(const std::vector<NamedPath>& outputs) {
  bool on_stdout = false, on_stderr = false;  // an output is the file standard output / error is open on
  for (const NamedPath& out : outputs) {
    if (out.path.empty()) continue;
    const FileIdentity id = identity_of(out.path);
    on_stdout = on_stdout || is_open_on(id, STDOUT_FILENO);
    // (a terminal holds no file: text beside the output there corrupts nothing)
    on_stderr = on_stderr || (is_open_on(id, STDERR_FILENO) && ::isatty(STDERR_FILENO) == 0);
  }
  if (on_stdout) text::report_stream() = on_stderr ? nullptr : stderr;
  if (on_stderr) text::progress_stream() = nullptr;
}

void write_checked_outputs(const std::function<void()>& write) {
  try {
    write();
  } catch (const ResourceError&) {
    throw;
  } catch (const Error& e) {
    throw ResourceError(e.what());
  }
}

}  // namespace pasa::cli
