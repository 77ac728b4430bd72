// SPDX-License-Identifier: Apache-2.0
// Shared by the .npy and .safetensors tests: a scratch directory, random tensors, and a check that a
// call throws pasa::Error with a message naming the source and the problem.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pasa/error.h"
#include "pasa/tensor.h"

namespace pasa::io::test {

// A fresh directory under the system temp dir, removed with its contents when the test ends.
class TempDir {
 public:
  TempDir() {
    std::random_device entropy;
    path_ = std::filesystem::temp_directory_path() /
            ("pasa_io_test_" + std::to_string(entropy()) + "_" + std::to_string(entropy()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Random bit patterns (NaNs and infinities included): the formats must carry bytes, not values.
inline HostTensor random_tensor(DType dtype, std::vector<std::int64_t> shape, unsigned seed) {
  HostTensor t{dtype, std::move(shape), {}};
  t.bytes.resize(static_cast<std::size_t>(t.numel()) * dtype_size(dtype));
  std::mt19937 rng(seed);
  for (auto& b : t.bytes) b = static_cast<std::uint8_t>(rng());
  return t;
}

inline std::vector<std::uint8_t> bytes_of(std::string_view text) { return {text.begin(), text.end()}; }

inline void append(std::vector<std::uint8_t>& out, std::string_view text) {
  out.insert(out.end(), text.begin(), text.end());
}

// EXPECT_TRUE(throws_error([&] { ... }, "file.npy", {"truncated", "24"})): the call must throw
// pasa::Error whose message starts with "file.npy: " and contains every phrase.
template <typename F>
::testing::AssertionResult throws_error(F&& call, const std::string& source,
                                        std::initializer_list<std::string_view> phrases) {
  try {
    call();
  } catch (const pasa::Error& e) {
    const std::string message = e.what();
    if (!message.starts_with(source + ": ")) {
      return ::testing::AssertionFailure() << "message does not start with '" << source << ": ': " << message;
    }
    for (const std::string_view phrase : phrases) {
      if (message.find(phrase) == std::string::npos) {
        return ::testing::AssertionFailure() << "message lacks '" << phrase << "': " << message;
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than pasa::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception was thrown";
}

}  // namespace pasa::io::test
