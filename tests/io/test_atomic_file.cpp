// SPDX-License-Identifier: Apache-2.0
// Writers replace a file whole or leave it untouched: a failed write (full disk, file-size limit)
// keeps the old contents and leaves no temporary behind; devices are written in place and their
// failures reported; the signal handler's cleanup removes the temporaries of writes in progress.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>
#include <fstream>
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

TEST(AtomicFile, SymbolicLinksAreFollowed) {
  test::TempDir dir;
  const std::string target = dir.file("target.txt"), link = dir.file("link.txt");
  std::ofstream(target) << "old";
  std::filesystem::create_symlink(target, link);
  detail::write_text_atomically(link, "new");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(contents(target), "new");
}

TEST(AtomicFile, SignalCleanupWithNoWriteInProgressRemovesNothing) {
  test::TempDir dir;
  const std::string path = dir.file("kept.txt");
  detail::write_text_atomically(path, "data");
  detail::remove_pending_temporaries();
  EXPECT_EQ(contents(path), "data");
}

}  // namespace
}  // namespace pasa::io
