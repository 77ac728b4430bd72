// SPDX-License-Identifier: Apache-2.0
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>

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
  char path[kMaxPath];
};
std::array<PendingSlot, kSlots> g_pending;

// SIGINT and SIGTERM handlers, installed while at least one write runs and only over default actions.
std::mutex g_handler_mutex;
int g_writers = 0;
constexpr int kSignals[] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
bool g_installed[2] = {false, false};

extern "C" void remove_temporaries_and_die(int sig) {
  remove_pending_temporaries();
  std::signal(sig, SIG_DFL);  // the default action was in place before the write: die as it would
  std::raise(sig);
}

void install_handlers() {
  const std::lock_guard<std::mutex> lock(g_handler_mutex);
  if (g_writers++ > 0) return;
  for (int i = 0; i < 2; ++i) {
    struct sigaction current {};
    sigaction(kSignals[i], nullptr, &current);
    // A handler someone else installed (Python's KeyboardInterrupt, an application's) is left alone:
    // it does not kill the process in the middle of the write.
    g_installed[i] = current.sa_handler == SIG_DFL;
    if (!g_installed[i]) continue;
    struct sigaction ours {};
    ours.sa_handler = remove_temporaries_and_die;
    sigemptyset(&ours.sa_mask);
    sigaction(kSignals[i], &ours, &g_previous[i]);
  }
}

void restore_handlers() {
  const std::lock_guard<std::mutex> lock(g_handler_mutex);
  if (--g_writers > 0) return;
  for (int i = 0; i < 2; ++i) {
    if (g_installed[i]) sigaction(kSignals[i], &g_previous[i], nullptr);
    g_installed[i] = false;
  }
}

// Registers a temporary for the signal handler for its lifetime and removes the file unless released.
class Temporary {
 public:
  explicit Temporary(std::string path) : path_(std::move(path)) {
    if (path_.size() >= kMaxPath) return;
    for (PendingSlot& s : g_pending) {
      bool expected = false;
      if (s.taken.compare_exchange_strong(expected, true)) {
        std::memcpy(s.path, path_.c_str(), path_.size() + 1);
        s.ready.store(true);
        slot_ = &s;
        break;
      }
    }
  }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  ~Temporary() {
    if (!released_) ::unlink(path_.c_str());
    if (slot_ != nullptr) {
      slot_->ready.store(false);
      slot_->taken.store(false);
    }
  }
  const std::string& path() const { return path_; }
  void release() { released_ = true; }  // renamed into place: nothing to remove

 private:
  std::string path_;
  PendingSlot* slot_ = nullptr;
  bool released_ = false;
};

std::string errno_text(int err) { return std::string(" (") + std::strerror(err) + ")"; }

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

int write_pieces(int fd, std::span<const std::span<const std::uint8_t>> pieces) {
  for (const auto piece : pieces) {
    if (const int err = write_all(fd, piece); err != 0) return err;
  }
  return 0;
}

// Existing non-regular destinations (devices, pipes): written in place, every write checked.
void write_in_place(const std::string& path, std::span<const std::span<const std::uint8_t>> pieces) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open for writing" + errno_text(errno));
  const int err = write_pieces(fd, pieces);
  const int close_err = ::close(fd) != 0 ? errno : 0;
  if (err != 0 || close_err != 0) {
    throw ResourceError(path + ": write failed" + errno_text(err != 0 ? err : close_err));
  }
}

// Creates "<dir>/.<name>.tmp-<random>" exclusively, with the mode a new file would get (umask applied),
// and returns its descriptor; `temp` holds its registration. The name is registered before the file
// is created, so a signal at any moment after the creation finds it.
int create_temporary(const std::filesystem::path& target, std::unique_ptr<Temporary>& temp) {
  static std::atomic<std::uint64_t> counter{0};
  std::random_device entropy;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::uint64_t tag = (std::uint64_t{entropy()} << 32) ^ (counter++ * 0x9e3779b97f4a7c15ULL) ^
                              static_cast<std::uint64_t>(::getpid());
    std::string name(1, '.');
    name += target.filename().string();
    name += ".tmp-";
    name += std::to_string(tag % 1000000007);
    std::filesystem::path candidate = target;
    candidate.replace_filename(name);
    temp = std::make_unique<Temporary>(candidate.string());
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    const int err = errno;
    temp->release();  // the name is taken or nothing was created: never remove that file
    temp.reset();
    if (err != EEXIST) {
      throw Error(target.string() + ": cannot open for writing (creating a temporary file next to it: " +
                  std::strerror(err) + ")");
    }
  }
  throw Error(target.string() + ": cannot create a temporary file next to it");
}

}  // namespace

void remove_pending_temporaries() noexcept {
  for (PendingSlot& s : g_pending) {
    if (s.ready.load()) ::unlink(s.path);
  }
}

void write_file_atomically(const std::string& path, std::span<const std::span<const std::uint8_t>> pieces) {
  if (path.empty()) throw Error("output path is empty");
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target(path);
  // A symbolic link is followed: the file it points to is replaced, the link kept.
  if (fs::is_symlink(fs::symlink_status(target, ec))) {
    const fs::path resolved = fs::canonical(target, ec);
    if (!ec) target = resolved;
  }
  struct stat existing {};
  const bool exists = ::stat(target.c_str(), &existing) == 0;
  if (exists && S_ISDIR(existing.st_mode)) throw Error(path + ": is a directory, not a file");
  if (exists && !S_ISREG(existing.st_mode)) {
    write_in_place(path, pieces);
    return;
  }
  install_handlers();
  struct RestoreHandlers {
    ~RestoreHandlers() { restore_handlers(); }
  } restore;
  std::unique_ptr<Temporary> temp;
  const int fd = create_temporary(target, temp);
  // Keep the permissions of the file being replaced.
  if (exists) ::fchmod(fd, existing.st_mode & 07777);
  int err = write_pieces(fd, pieces);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw ResourceError(path + ": write failed" + errno_text(err) + "; the file was not changed");
  if (::rename(temp->path().c_str(), target.c_str()) != 0) {
    throw ResourceError(path + ": cannot replace the file" + errno_text(errno) + "; it was not changed");
  }
  temp->release();
}

void write_text_atomically(const std::string& path, std::string_view text) {
  const std::span<const std::uint8_t> piece(reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  write_file_atomically(path, std::span(&piece, 1));
}

}  // namespace pasa::io::detail
