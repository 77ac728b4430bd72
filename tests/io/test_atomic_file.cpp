// SPDX-License-Identifier: Apache-2.0
// Writers replace a file whole or leave it untouched: a failed write (full disk, file-size limit)
// keeps the old contents and leaves no temporary behind; devices are written in place and their
// failures reported; links are followed, dangling ones too; the output check really creates the
// temporary; a batch of files changes all together or not at all, a rename that fails at commit
// included; another user's file in a sticky directory is refused before anything changes; the signal
// handler's cleanup removes the temporaries of writes in progress.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

#include "io/atomic_file.h"
#include "io_test_helpers.h"
#include "pasa/error.h"
#include "test_util.h"

namespace pasa::io {
namespace {

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::size_t entries_in(const std::string& dir) {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir),
                                                std::filesystem::directory_iterator()));
}

TEST(AtomicFile, ReplacesTheFileAndKeepsItsPermissions) {
  test::TempDir dir;
  const std::string path = dir.file("out.txt");
  std::ofstream(path) << "old contents";
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  detail::write_text_atomically(path, "new");
  EXPECT_EQ(contents(path), "new");
  EXPECT_EQ(std::filesystem::status(path).permissions(),
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(entries_in(dir.path()), 1u) << "a temporary was left behind";
}

TEST(AtomicFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  test::TempDir dir;
  const std::string path = dir.file("out.bin");
  std::ofstream(path) << "old contents";
  // A file-size limit makes the write fail midway, as a full disk would (EFBIG instead of ENOSPC).
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string big(1 << 20, 'x');
  bool threw_resource_error = false;
  try {
    detail::write_text_atomically(path, big);
  } catch (const ResourceError& e) {
    threw_resource_error = true;
    EXPECT_NE(std::string(e.what()).find("write failed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the file was not changed"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_TRUE(threw_resource_error);
  EXPECT_EQ(contents(path), "old contents");
  EXPECT_EQ(entries_in(dir.path()), 1u) << "a temporary was left behind";
}

TEST(AtomicFile, DevicesAreWrittenInPlaceAndTheirFailuresReported) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  bool threw_resource_error = false;
  try {
    detail::write_text_atomically("/dev/full", "anything");
  } catch (const ResourceError& e) {
    threw_resource_error = true;
    EXPECT_NE(std::string(e.what()).find("/dev/full: write failed"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw_resource_error);
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/full")) << "the device node was replaced";
  detail::write_text_atomically("/dev/null", "discarded");  // a device that accepts writes
}

TEST(AtomicFile, BadDestinationsAreErrorsNamingThePath) {
  test::TempDir dir;
  pasa::test::expect_error([&] { detail::write_text_atomically(dir.path(), "x"); }, "is a directory");
  pasa::test::expect_error([&] { detail::write_text_atomically(dir.file("missing/out.txt"), "x"); },
                     dir.file("missing/out.txt") + ": cannot open for writing");
}

TEST(AtomicFile, APathWithANulIsRefusedBeforeAnyFileIsCreated) {
  test::TempDir dir;
  const std::string path = dir.file("out.txt") + std::string("\0x", 2);
  for (const auto& call : std::initializer_list<std::function<void()>>{
           [&] { detail::check_output_path(path); },
           [&] { detail::write_text_atomically(path, "x"); },
           [&] { detail::FileBatch().add(path, detail::FileBytes{"x", {}}); }}) {
    pasa::test::expect_error(call, "out.txt\\x00x' contains a NUL character");
  }
  EXPECT_EQ(entries_in(dir.path()), 0u);
}

// In a sticky directory (/tmp) only a file's owner (or the directory's, or root) may replace it: the
// output check refuses it before any work, and a write refuses it before any link or rename (a
// backup link made there could not be removed). Run as another user in a child process: needs root.
TEST(AtomicFile, AnotherUsersFileInAStickyDirectoryIsRefusedBeforeAnyChange) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run the writer as another user";
  test::TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms::all);
  const std::string sticky = dir.file("sticky");
  std::filesystem::create_directory(sticky);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  const std::string path = sticky + "/out.txt";
  std::ofstream(path) << "old contents";
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  ASSERT_EQ(::chown(path.c_str(), 1234, 1234), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // (no gtest assertions here: the exit code says which step failed)
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    const auto refused = [](const std::function<void()>& call) {
      try {
        call();
      } catch (const Error& e) {
        return std::string(e.what()).find("belongs to user 1234 in the sticky directory") != std::string::npos;
      }
      return false;
    };
    if (!refused([&] { detail::check_output_path(path); })) ::_exit(11);
    if (!refused([&] { detail::write_text_atomically(path, "new"); })) ::_exit(12);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setuid failed, 11: the check, 12: the write";
  EXPECT_EQ(contents(path), "old contents");
  EXPECT_EQ(entries_in(sticky), 1u) << "a temporary or a backup link was left behind";
}

// Runs `body` in a child process as user and group 65534; its exit code, or 10 where the switch failed.
int exit_code_as_nobody(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {  // (no gtest assertions here: the exit code says which step failed)
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    ::_exit(body());
  }
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(AtomicFile, AWriteProtectedFileIsRefusedAndKept) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to run the writer as another user (root writes anything)";
  test::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  const std::string path = dir.file("out.txt");
  std::ofstream(path) << "old contents";
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  const int code = exit_code_as_nobody([&] {
    try {
      detail::write_text_atomically(path, "new");
    } catch (const Error& e) {
      return std::string(e.what()).find("write-protected") != std::string::npos ? 0 : 12;
    }
    return 11;
  });
  EXPECT_EQ(code, 0) << "10: setuid failed, 11: written, 12: another error";
  EXPECT_EQ(contents(path), "old contents");
  EXPECT_EQ(entries_in(dir.path()), 1u) << "a temporary was left behind";
}

// The replacement keeps the file's owner and group where the writer may give them (root), and a
// set-id bit only with them: another user's replacement of a set-user-id file it may write was left
// set-user-id under the writer's name.
TEST(AtomicFile, TheReplacementKeepsTheOwnerOrItsSetIdBits) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to own files as other users";
  test::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0777), 0);
  const std::string path = dir.file("out.bin");
  std::ofstream(path) << "old contents";
  ASSERT_EQ(::chown(path.c_str(), 1234, 1234), 0);
  ASSERT_EQ(::chmod(path.c_str(), 06777), 0);
  detail::write_text_atomically(path, "root's");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 1234u);
  EXPECT_EQ(st.st_mode & 07777, 06777u);
  EXPECT_EQ(exit_code_as_nobody([&] {
              try {
                detail::write_text_atomically(path, "nobody's");
              } catch (const Error&) {
                return 11;
              }
              return 0;
            }),
            0);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(contents(path), "nobody's");
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_mode & 07777, 0777u) << "set-id bits kept under another owner";
}

TEST(AtomicFile, SymbolicLinksAreFollowed) {
  test::TempDir dir;
  const std::string target = dir.file("target.txt"), link = dir.file("link.txt");
  std::ofstream(target) << "old";
  std::filesystem::create_symlink(target, link);
  detail::write_text_atomically(link, "new");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(contents(target), "new");
}

TEST(AtomicFile, ADanglingLinkIsFollowedAndItsTargetCreated) {
  test::TempDir dir;
  std::filesystem::create_directory(dir.file("sub"));
  const std::string link = dir.file("link.txt");
  std::filesystem::create_symlink("sub/new.txt", link);  // relative: to the link's directory
  detail::write_text_atomically(link, "new");
  EXPECT_TRUE(std::filesystem::is_symlink(link)) << "the link was replaced by a file";
  EXPECT_EQ(contents(dir.file("sub/new.txt")), "new");
  EXPECT_EQ(entries_in(dir.file("sub")), 1u) << "a temporary was left behind";
}

TEST(AtomicFile, ALinkIntoAMissingDirectoryNamesTheLinkAndItsTarget) {
  test::TempDir dir;
  const std::string link = dir.file("link.txt");
  std::filesystem::create_symlink("missing/new.txt", link);
  for (const auto& call : {std::function<void()>([&] { detail::write_text_atomically(link, "x"); }),
                           std::function<void()>([&] { detail::check_output_path(link); })}) {
    pasa::test::expect_error(call, link + ": is a symbolic link to " + dir.file("missing/new.txt") +
                                       ", whose directory " + dir.file("missing") + " does not exist");
  }
  const std::string loop = dir.file("loop.txt");
  std::filesystem::create_symlink("loop.txt", loop);
  pasa::test::expect_error([&] { detail::check_output_path(loop); }, "too many levels of symbolic links");
  EXPECT_EQ(entries_in(dir.path()), 2u);
}

TEST(AtomicFile, TheOutputCheckCreatesAndRemovesTheTemporary) {
  test::TempDir dir;
  detail::check_output_path(dir.file("new.txt"));
  EXPECT_EQ(entries_in(dir.path()), 0u) << "the check left a file behind";
  pasa::test::expect_error([&] { detail::check_output_path(dir.path()); }, "is a directory");
  pasa::test::expect_error([&] { detail::check_output_path(dir.file("missing/x.txt")); },
                           dir.file("missing/x.txt") + ": cannot open for writing");
  // Places where no file can be created, whatever access() says (it says yes to root everywhere).
  if (std::filesystem::is_directory("/proc/self")) {
    pasa::test::expect_error([] { detail::check_output_path("/proc/pasa_test.npy"); },
                             "/proc/pasa_test.npy: cannot open for writing");
  }
  if (std::filesystem::exists("/dev/null")) detail::check_output_path("/dev/null");  // written in place
}

TEST(FileBatch, NothingChangesUntilEveryFileIsWritten) {
  test::TempDir dir;
  const std::string first = dir.file("first.txt"), second = dir.file("second.txt");
  std::ofstream(first) << "old first";
  {
    detail::FileBatch batch;
    batch.add(first, {"new first", {}});
    EXPECT_EQ(contents(first), "old first") << "replaced before commit()";
    // The second file fails (a device that takes no bytes): the first must stay as it was.
    if (std::filesystem::exists("/dev/full")) {
      batch.add("/dev/full", {"anything", {}});
      EXPECT_THROW(batch.commit(), ResourceError);
    }
  }
  EXPECT_EQ(contents(first), "old first");
  EXPECT_EQ(entries_in(dir.path()), 1u) << "a temporary was left behind";
  {
    detail::FileBatch batch;
    batch.add(first, {"new first", {}});
    pasa::test::expect_error([&] { batch.add(dir.path(), {"x", {}}); }, "is a directory");
  }  // destroyed without commit()
  EXPECT_EQ(contents(first), "old first");
  EXPECT_EQ(entries_in(dir.path()), 1u) << "an uncommitted batch left a temporary behind";
  const std::string data = "+data";
  detail::FileBatch batch;
  batch.add(first, {"new first", {}});
  batch.add(second, {"second", {std::span(reinterpret_cast<const std::uint8_t*>(data.data()), data.size())}});
  batch.commit();
  EXPECT_EQ(contents(first), "new first");
  EXPECT_EQ(contents(second), "second+data");
  EXPECT_EQ(entries_in(dir.path()), 2u);
}

// A rename that fails at commit (here: a destination became a directory after add(), as an
// append-only file or a bind mount refuses it) puts back the files renamed before it: the replaced
// one's old contents, and no file where none was.
TEST(FileBatch, ARenameThatFailsPutsBackTheFilesRenamedBeforeIt) {
  test::TempDir dir;
  const std::string kept = dir.file("kept.txt"), created = dir.file("created.txt"), blocked = dir.file("blocked.txt");
  std::ofstream(kept) << "old kept";
  std::ofstream(blocked) << "old blocked";
  {
    detail::FileBatch batch;  // (the one that takes no link added first: it is renamed last)
    batch.add(blocked, {"new blocked", {}});
    batch.add(kept, {"new kept", {}});
    batch.add(created, {"new created", {}});
    std::filesystem::remove(blocked);
    std::filesystem::create_directories(blocked + "/inside");  // (a non-empty directory: no rename over it)
    pasa::test::expect_error([&] { batch.commit(); }, "blocked.txt: cannot replace the file");
  }
  EXPECT_EQ(contents(kept), "old kept");
  EXPECT_FALSE(std::filesystem::exists(created));
  EXPECT_EQ(entries_in(dir.path()), 2u) << "a temporary or a backup link was left behind";
}

TEST(AtomicFile, SignalCleanupWithNoWriteInProgressRemovesNothing) {
  test::TempDir dir;
  const std::string path = dir.file("kept.txt");
  detail::write_text_atomically(path, "data");
  detail::remove_pending_temporaries();
  EXPECT_EQ(contents(path), "data");
}

// The writes' signal handlers are put back at the end only where they are still in place: a handler
// the program installed during a write (in another thread, a save running) stays.
TEST(AtomicFile, AHandlerInstalledDuringAWriteStays) {
  test::TempDir dir;
  const std::string path = dir.file("out.txt");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGTERM, SIG_DFL);
    {
      detail::FileBatch batch;
      batch.add(path, {"new", {}});
      std::signal(SIGTERM, [](int) { ::_exit(7); });
      batch.commit();
    }
    std::raise(SIGTERM);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7)
      << "the program's SIGTERM handler did not run (status " << status << ")";
}

// A child forked while a write runs inherits its handlers: a signal there takes the default action,
// without touching the parent's temporaries.
TEST(AtomicFile, AChildForkedDuringAWriteDiesOfItsSignalAndLeavesTheWrite) {
  test::TempDir dir;
  const std::string path = dir.file("out.txt");
  std::ofstream(path) << "old";
  const auto previous = std::signal(SIGTERM, SIG_DFL);
  {
    detail::FileBatch batch;
    batch.add(path, {"new", {}});
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      std::raise(SIGTERM);
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
    EXPECT_EQ(entries_in(dir.path()), 2u) << "the child removed the parent's temporary";
    // A child that writes a file of its own, stopped by SIGTERM during that write, removes its own
    // temporary (and only that).
    const pid_t writer = ::fork();
    ASSERT_GE(writer, 0);
    if (writer == 0) {
      detail::FileBatch own;
      own.add(dir.file("child.txt"), {"child", {}});
      std::raise(SIGTERM);
      ::_exit(0);
    }
    ASSERT_EQ(::waitpid(writer, &status, 0), writer);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
    EXPECT_EQ(entries_in(dir.path()), 2u) << "the child's temporary was left, or the parent's removed";
    batch.commit();
  }
  std::signal(SIGTERM, previous);
  EXPECT_EQ(contents(path), "new");
}

}  // namespace
}  // namespace pasa::io
