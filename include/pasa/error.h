// pasa/error.h — the one exception type every public entry point throws.
#pragma once

#include <stdexcept>
#include <string>

namespace pasa {

// Thrown for bad input (shapes, dtypes, files, policy text) and unsupported requests. The message names
// the argument or file and says what is wrong, so it can be shown to a user as is.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace pasa
