// SPDX-License-Identifier: Apache-2.0
// pasa/error.h — the exception types every public entry point throws.
#pragma once

#include <stdexcept>
#include <string>

namespace pasa {

// Thrown for bad input (shapes, dtypes, files, policy text) and unsupported requests. The message names
// the argument or file and says what is wrong, so it can be shown to a user as is. A NUL in it (from
// text the caller gave) is written \x00: what() is read up to the first NUL.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(without_nul(what)) {}

 private:
  static std::string without_nul(const std::string& text) {
    std::string out;
    for (const char c : text) {
      if (c == '\0') {
        out += "\\x00";
      } else {
        out += c;
      }
    }
    return out;
  }
};

// The request was valid but the machine could not carry it out: not enough memory (host or device), a
// write that failed (full disk, quota, I/O error), a device failure. A subclass of Error, so one catch
// handles both; the CLI exits with 1 for these and 2 for other Errors (docs/api.md).
class ResourceError : public Error {
 public:
  explicit ResourceError(const std::string& what) : Error(what) {}
};

}  // namespace pasa
