// SPDX-License-Identifier: Apache-2.0
#include "io/atomic_file.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string_view>
#include <vector>

#include "io/byte_io.h"
#include "pasa/error.h"

namespace pasa::io::detail {
namespace {

// Temporaries of the writes in progress, for the signal handler: fixed storage, so the handler reads
// them without allocating or locking. A write that finds every slot taken still runs, unregistered.
constexpr std::size_t kSlots = 64;
constexpr std::size_t kMaxPath = 4096;
struct PendingSlot {
  std::atomic<bool> taken{false};
  std::atomic<bool> ready{false};  // path holds a complete name
  bool folder = false;             // a folder to remove if empty, not a temporary file (set before ready)
  char path[kMaxPath];
};
std::array<PendingSlot, kSlots> g_pending;

// A free slot holding path, or nullptr (all taken, or the path too long for one).
PendingSlot* take_slot(const std::string& path, bool folder) {
  if (path.size() >= kMaxPath) return nullptr;
  for (PendingSlot& s : g_pending) {
    bool expected = false;
    if (s.taken.compare_exchange_strong(expected, true)) {
      std::memcpy(s.path, path.c_str(), path.size() + 1);
      s.folder = folder;
      s.ready.store(true);
      return &s;
    }
  }
  return nullptr;
}

void free_slot(PendingSlot* s) {
  if (s == nullptr) return;
  s->ready.store(false);
  s->taken.store(false);
}

// While at least one write runs, and only over default actions: the signals that end a process
// (Ctrl-C, kill, a closed terminal, Ctrl-\) remove the temporaries first, and SIGXFSZ (a file past
// `ulimit -f`) is ignored, so that the write fails with EFBIG and says so instead of killing the
// process with its temporary left behind.
std::mutex g_handler_mutex;
int g_writers = 0;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXFSZ};
constexpr int kSignalCount = sizeof(kSignals) / sizeof(kSignals[0]);
struct sigaction g_previous[kSignalCount];
bool g_installed[kSignalCount] = {};

// While a batch renames its files (FileBatch::commit), a signal is only recorded, and acted on once
// the renames are done: a batch's outputs change together. (A per-thread signal mask would not do:
// the signal goes to any thread that does not block it, and OpenMP's and torch's threads don't.)
std::atomic<int> g_committing{0};
std::atomic<int> g_deferred_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "used in a signal handler");

void die_of(int sig) {
  remove_pending_temporaries();
  std::signal(sig, SIG_DFL);  // the default action was in place before the write: die as it would
  std::raise(sig);
}

extern "C" void remove_temporaries_and_die(int sig) {
  if (g_committing.load() > 0) {
    int none = 0;
    g_deferred_signal.compare_exchange_strong(none, sig);
    return;
  }
  die_of(sig);
}

// What install_handlers puts in place for kSignals[i].
void (*our_handler(int i))(int) { return kSignals[i] == SIGXFSZ ? SIG_IGN : remove_temporaries_and_die; }

// A child forked during a write inherits the handlers, the count of writes and the temporaries, none
// of them its own: it starts with the handlers the writes found, and no write (its own writes then
// install and remove them as anywhere). The mutex is held across fork() so that the child's is free.
extern "C" void lock_for_fork() { g_handler_mutex.lock(); }
extern "C" void unlock_after_fork() { g_handler_mutex.unlock(); }
extern "C" void reset_in_forked_child() {
  if (g_writers > 0) {
    for (int i = 0; i < kSignalCount; ++i) {
      if (g_installed[i]) sigaction(kSignals[i], &g_previous[i], nullptr);
      g_installed[i] = false;
    }
  }
  g_writers = 0;
  g_committing.store(0);
  g_deferred_signal.store(0);
  for (PendingSlot& slot : g_pending) {
    slot.ready.store(false);
    slot.taken.store(false);
  }
  g_handler_mutex.unlock();
}

void install_handlers() {
  static const int registered = pthread_atfork(lock_for_fork, unlock_after_fork, reset_in_forked_child);
  static_cast<void>(registered);
  const std::lock_guard<std::mutex> lock(g_handler_mutex);
  if (g_writers++ > 0) return;
  for (int i = 0; i < kSignalCount; ++i) {
    struct sigaction current {};
    sigaction(kSignals[i], nullptr, &current);
    // A handler someone else installed (Python's KeyboardInterrupt, an application's) is left alone:
    // it does not kill the process in the middle of the write.
    g_installed[i] = current.sa_handler == SIG_DFL;
    if (!g_installed[i]) continue;
    struct sigaction ours {};
    ours.sa_handler = our_handler(i);
    sigemptyset(&ours.sa_mask);
    sigaction(kSignals[i], &ours, &g_previous[i]);
  }
}

void restore_handlers() {
  const std::lock_guard<std::mutex> lock(g_handler_mutex);
  if (--g_writers > 0) return;
  for (int i = 0; i < kSignalCount; ++i) {
    // (only where ours is still in place: a handler the program installed during the write stays)
    struct sigaction current {};
    sigaction(kSignals[i], nullptr, &current);
    if (g_installed[i] && current.sa_handler == our_handler(i)) sigaction(kSignals[i], &g_previous[i], nullptr);
    g_installed[i] = false;
  }
}

// Registers a temporary for the signal handler for its lifetime and removes the file unless released.
class Temporary {
 public:
  explicit Temporary(std::string path) : path_(std::move(path)), slot_(take_slot(path_, false)) {}
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  ~Temporary() {
    if (!released_) ::unlink(path_.c_str());
    free_slot(slot_);
  }
  const std::string& path() const { return path_; }
  void release() { released_ = true; }  // renamed into place: nothing to remove

 private:
  std::string path_;
  PendingSlot* slot_ = nullptr;
  bool released_ = false;
};

std::string errno_text(int err) { return std::string(" (") + std::strerror(err) + ")"; }

// Why this process may not replace the existing regular file `target` (`existing` its stat), or empty:
// the file is write-protected against it; or, in a sticky directory (/tmp) only the file's owner, the
// directory's and root may rename over it or remove a link to it, so the rename would fail after the
// work and the backup link stay behind.
std::string replace_refusal(const std::string& target, const struct stat& existing) {
  // A file its owner write-protected is not replaced (np.save and the shell's > refuse it too), though
  // the rename through a temporary could.
  if (::access(target.c_str(), W_OK) != 0 && errno == EACCES) {
    return "cannot replace the file: it is write-protected (Permission denied)";
  }
  const std::filesystem::path file(target);
  const std::string dir = file.has_parent_path() ? file.parent_path().string() : std::string(".");
  struct stat d {};
  const uid_t me = ::geteuid();
  if (me == 0 || existing.st_uid == me || ::stat(dir.c_str(), &d) != 0 || (d.st_mode & S_ISVTX) == 0 ||
      d.st_uid == me) {
    return {};
  }
  return "cannot replace the file: it belongs to user " + std::to_string(existing.st_uid) + " in the sticky " +
         "directory " + dir + ", where only its owner may replace it";
}

// The temporary `fd` that replaces a file takes its owner, group and permissions, as far as this
// process may give them (root: all; a member of the file's group: the group); a set-user-id or
// set-group-id bit is kept only with the owner or group it was set for.
void keep_owner_and_mode(int fd, const struct stat& existing) {
  if (::fchown(fd, existing.st_uid, existing.st_gid) != 0) {
    static_cast<void>(::fchown(fd, static_cast<uid_t>(-1), existing.st_gid));
  }
  struct stat now {};
  const bool known = ::fstat(fd, &now) == 0;
  mode_t mode = existing.st_mode & 07777;
  if (!known || now.st_uid != existing.st_uid) mode &= ~static_cast<mode_t>(S_ISUID);
  if (!known || now.st_gid != existing.st_gid) mode &= ~static_cast<mode_t>(S_ISGID);
  ::fchmod(fd, mode);
}

// Handlers for the lifetime of a scope that may hold temporaries.
class SignalCleanup {
 public:
  SignalCleanup() { install_handlers(); }
  ~SignalCleanup() { restore_handlers(); }
  SignalCleanup(const SignalCleanup&) = delete;
  SignalCleanup& operator=(const SignalCleanup&) = delete;
};

// Writes all of `bytes` to fd, retrying short writes and EINTR; returns errno, or 0.
int write_all(int fd, std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
  return 0;
}

int write_bytes(int fd, const FileBytes& bytes) {
  const std::span<const std::uint8_t> head(reinterpret_cast<const std::uint8_t*>(bytes.head.data()),
                                           bytes.head.size());
  if (const int err = write_all(fd, head); err != 0) return err;
  for (const auto piece : bytes.data) {
    if (const int err = write_all(fd, piece); err != 0) return err;
  }
  return 0;
}

// Existing non-regular destinations (devices, pipes) and the process's own descriptors: written in
// place, every write checked. An own descriptor is written as it is open (at its offset, appending
// where it appends), after what stdio holds for it.
void write_in_place(const std::string& path, const FileBytes& bytes) {
  if (const int own = own_descriptor(path); own >= 0) {
    std::fflush(nullptr);
    if (const int err = write_bytes(own, bytes); err != 0) throw ResourceError(path + ": write failed" + errno_text(err));
    return;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open for writing" + errno_text(errno));
  const int err = write_bytes(fd, bytes);
  const int close_err = ::close(fd) != 0 ? errno : 0;
  if (err != 0 || close_err != 0) {
    throw ResourceError(path + ": write failed" + errno_text(err != 0 ? err : close_err));
  }
}

// Failures to create a file that are the machine's (space, inodes, descriptors, the disk), not the path's.
bool is_resource_errno(int err) {
  return err == ENOSPC || err == EDQUOT || err == EIO || err == ENOMEM || err == EMFILE || err == ENFILE;
}

// The temporary's name keeps at most this many bytes of the target's (cut on a UTF-8 character's
// first byte): a name near the file system's limit, 255 bytes, is legal for the target but not with
// the temporary's 16 more.
constexpr std::size_t kTempNameStem = 200;
std::string temp_name_stem(const std::string& name) {
  std::size_t n = std::min(name.size(), kTempNameStem);
  while (n > 0 && n < name.size() && (static_cast<unsigned char>(name[n]) & 0xC0u) == 0x80u) --n;
  return name.substr(0, n);
}

// Claims a fresh name "<dir>/.<name>.tmp-<random>" next to `target` with make(name), which creates
// a file there exclusively and returns false with errno set where it could not (EEXIST: another name
// is tried); `temp` holds the name's registration, made before the file is, so that a signal at any
// moment after the creation finds it. Returns 0, or the errno of the failure (EEXIST: no free name).
template <class Make>
int claim_temporary(const std::filesystem::path& target, std::unique_ptr<Temporary>& temp, Make make) {
  static std::atomic<std::uint64_t> counter{0};
  std::random_device entropy;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::uint64_t tag = (std::uint64_t{entropy()} << 32) ^ (counter++ * 0x9e3779b97f4a7c15ULL) ^
                              static_cast<std::uint64_t>(::getpid());
    std::string name(1, '.');
    name += temp_name_stem(target.filename().string());
    name += ".tmp-";
    name += std::to_string(tag % 1000000007);
    std::filesystem::path candidate = target;
    candidate.replace_filename(name);
    temp = std::make_unique<Temporary>(candidate.string());
    if (make(candidate)) return 0;
    const int err = errno;
    temp->release();  // the name is taken or nothing was created: never remove that file
    temp.reset();
    if (err != EEXIST) return err;
  }
  return EEXIST;
}

// Creates a temporary file next to `target` (claim_temporary) with the mode a new file would get
// (umask applied), and returns its descriptor. `path` (what the caller named) is the one the
// messages name.
int create_temporary(const std::filesystem::path& target, const std::string& path, std::unique_ptr<Temporary>& temp) {
  int fd = -1;
  const int err = claim_temporary(target, temp, [&](const std::filesystem::path& name) {
    fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    return fd >= 0;
  });
  if (err == EEXIST) throw Error(path + ": cannot create a temporary file next to it");
  if (err != 0) {
    const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
    const std::string what = path + ": cannot open for writing (creating a temporary file in " + dir + ": " +
                             std::strerror(err) + ")";
    if (is_resource_errno(err)) throw ResourceError(what);
    throw Error(what);
  }
  return fd;
}

}  // namespace

struct FileBatch::Entry {
  std::string path;                   // as the caller named it, for messages
  std::string target;                 // where its links lead
  std::unique_ptr<Temporary> temp;    // the new contents; null for a destination written in place
  FileBytes in_place;                 // the bytes of a destination written in place
  bool existed = false;               // commit: whether the target existed before the renames
  std::unique_ptr<Temporary> backup;  // commit: a hard link to the file being replaced, if one was made
  bool undoable() const { return !existed || backup != nullptr; }
};

void remove_pending_temporaries() noexcept {
  for (PendingSlot& s : g_pending) {
    if (s.ready.load() && !s.folder) ::unlink(s.path);
  }
  // (then the folders, which the temporaries may have been in; rmdir removes only an empty one)
  for (PendingSlot& s : g_pending) {
    if (s.ready.load() && s.folder) ::rmdir(s.path);
  }
}

FolderRemovedOnSignal::FolderRemovedOnSignal(const std::string& path) {
  install_handlers();
  slot_ = take_slot(path, true);
}

FolderRemovedOnSignal::~FolderRemovedOnSignal() {
  free_slot(static_cast<PendingSlot*>(slot_));
  restore_handlers();
}

bool is_cleanup_handler(void (*handler)(int)) noexcept { return handler == remove_temporaries_and_die; }

int own_descriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (path.size() <= prefix.size() || path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = path.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoi(digits);
  }
  return -1;
}

std::string resolve_output_path(const std::string& path) {
  check_path(path, "output");  // (check_output_path and FileBatch::add come here first too)
  if (own_descriptor(path) >= 0) return path;  // written through the descriptor, not what it leads to
  // Where the kernel can open it, an existing file that is not a regular one (/dev/stdout, /dev/fd/N,
  // a pipe) is written in place through `path` itself: its links may end in /proc's pseudo-targets
  // ("pipe:[N]"), which are no path to follow. Only a regular file is replaced, through its target.
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode)) return path;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target(path);
  // Link by link (not fs::canonical, which fails on a dangling link): a link's relative target is
  // relative to the link's directory. 40 is Linux's limit on links in one lookup.
  for (int links = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++links) {
    if (links == 40) throw Error(path + ": too many levels of symbolic links");
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw Error(path + ": cannot read the symbolic link " + target.string() + " (" + ec.message() + ")");
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  if (target != fs::path(path)) {
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec)) {
      throw Error(path + ": is a symbolic link to " + target.string() + ", whose directory " + dir.string() +
                  " does not exist");
    }
  }
  return target.string();
}

void check_output_path(const std::string& path) {
  if (const int own = own_descriptor(path); own >= 0) {
    const int flags = ::fcntl(own, F_GETFL);
    if (flags < 0 || (flags & O_ACCMODE) == O_RDONLY) {
      throw Error(path + ": cannot open for writing" + errno_text(flags < 0 ? errno : EBADF));
    }
    return;
  }
  const std::string target = resolve_output_path(path);
  struct stat existing {};
  if (::stat(target.c_str(), &existing) == 0) {
    if (S_ISDIR(existing.st_mode)) throw Error(path + ": is a directory, not a file");
    if (!S_ISREG(existing.st_mode)) {  // written in place: opening it could block (a pipe), so ask
      if (::access(target.c_str(), W_OK) != 0) throw Error(path + ": cannot open for writing" + errno_text(errno));
      return;
    }
    if (const std::string why = replace_refusal(target, existing); !why.empty()) throw Error(path + ": " + why);
  }
  // (The temporary's name is cut short, so it would pass where the file's own name is too long.)
  const std::filesystem::path file(target);
  const std::string dir = file.has_parent_path() ? file.parent_path().string() : std::string(".");
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && file.filename().string().size() > static_cast<std::size_t>(name_max)) {
    throw Error(path + ": cannot open for writing" + errno_text(ENAMETOOLONG));
  }
  const SignalCleanup cleanup;
  std::unique_ptr<Temporary> temp;
  ::close(create_temporary(target, path, temp));  // temp's destructor removes the file
}

FileBatch::FileBatch() { install_handlers(); }

FileBatch::~FileBatch() {
  entries_.clear();  // removes the temporaries not renamed, while the handlers still cover them
  restore_handlers();
}

void FileBatch::add(const std::string& path, FileBytes bytes) {
  auto entry = std::make_unique<Entry>();
  entry->path = path;
  entry->target = resolve_output_path(path);
  struct stat existing {};
  const bool exists = ::stat(entry->target.c_str(), &existing) == 0;
  if (exists && S_ISDIR(existing.st_mode)) throw Error(path + ": is a directory, not a file");
  if (own_descriptor(path) >= 0 || (exists && !S_ISREG(existing.st_mode))) {
    entry->in_place = std::move(bytes);
    entries_.push_back(std::move(entry));
    return;
  }
  const int fd = create_temporary(entry->target, path, entry->temp);
  if (exists) keep_owner_and_mode(fd, existing);
  int err = write_bytes(fd, bytes);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw ResourceError(path + ": write failed" + errno_text(err) + "; the file was not changed");
  entries_.push_back(std::move(entry));
}

// The renames of a commit, during which the handler defers signals; the one deferred, if any, is
// acted on when they are done (or failed).
class RenamesInProgress {
 public:
  RenamesInProgress() { g_committing.fetch_add(1); }
  ~RenamesInProgress() {
    if (g_committing.fetch_sub(1) == 1) {
      if (const int sig = g_deferred_signal.exchange(0); sig != 0) die_of(sig);
    }
  }
  RenamesInProgress(const RenamesInProgress&) = delete;
  RenamesInProgress& operator=(const RenamesInProgress&) = delete;
};

void FileBatch::commit() {
  // Another user's file in a sticky directory cannot be replaced: refused before anything is written.
  for (const auto& e : entries_) {
    struct stat existing {};
    if (!e->temp || ::lstat(e->target.c_str(), &existing) != 0 || !S_ISREG(existing.st_mode)) continue;
    if (const std::string why = replace_refusal(e->target, existing); !why.empty()) {
      throw ResourceError(e->path + ": " + why + "; it was not changed" +
                          (entries_.size() > 1 ? ", nor were the other outputs" : ""));
    }
  }
  for (const auto& e : entries_) {
    if (!e->temp) write_in_place(e->path, e->in_place);
  }
  const RenamesInProgress renames;
  // Each file being replaced stays reachable under a hard link until every rename is done, so that a
  // rename that fails puts back those before it (and removes the files that did not exist). A file
  // that takes no link (a file system without hard links, an append-only file, a bind mount) is
  // renamed after the rest, so that a failure there is still undone everywhere else.
  std::vector<Entry*> order;
  for (const auto& e : entries_) {
    if (!e->temp) continue;
    struct stat existing {};
    e->existed = ::lstat(e->target.c_str(), &existing) == 0;
    if (e->existed) {
      claim_temporary(e->target, e->backup, [&](const std::filesystem::path& name) {
        return ::link(e->target.c_str(), name.c_str()) == 0;
      });
    }
    order.push_back(e.get());
  }
  std::stable_partition(order.begin(), order.end(), [](const Entry* e) { return e->undoable(); });
  for (std::size_t i = 0; i < order.size(); ++i) {
    Entry& e = *order[i];
    if (::rename(e.temp->path().c_str(), e.target.c_str()) == 0) {
      e.temp->release();
      continue;
    }
    const int err = errno;
    std::string kept;  // the outputs already replaced that could not be put back
    for (std::size_t j = i; j-- > 0;) {
      Entry& done = *order[j];
      const bool undone = done.backup ? ::rename(done.backup->path().c_str(), done.target.c_str()) == 0
                                      : !done.existed && ::unlink(done.target.c_str()) == 0;
      if (undone && done.backup) done.backup->release();
      if (!undone) kept += (kept.empty() ? "" : ", ") + done.path;
    }
    throw ResourceError(e.path + ": cannot replace the file" + errno_text(err) + "; it was not changed" +
                        (i == 0 ? "" : kept.empty() ? ", nor were the other outputs" : "; replaced: " + kept));
  }
  entries_.clear();  // (the backups' links removed)
}

void write_file_atomically(const std::string& path, FileBytes bytes) {
  FileBatch batch;
  batch.add(path, std::move(bytes));
  batch.commit();
}

void write_text_atomically(const std::string& path, std::string_view text) {
  write_file_atomically(path, FileBytes{std::string(text), {}});
}

}  // namespace pasa::io::detail
