// SPDX-License-Identifier: Apache-2.0
// Brace-style string formatting for messages and tables, so the library, the Python extension and the
// CLI need nothing beyond the standard library (g++ 12 has no std::format).
//
//   format("{}: {} of {:.3f}", name, count, ratio)    replacement fields in order
//   format("{1} before {0}", a, b)                      or by index
//   spec: [[fill]align][sign][0][width][.precision][type]
//     align  < left, > right, ^ centre (strings default left, numbers right)
//     sign   + (always) or - (negatives only, the default)
//     type   integers: d, x, X, b;  floating point: f, e, g (printf's meaning), none (shortest
//            round-trip digits: fixed for exponents in [-4, 16), scientific outside);  strings: s
//   "{{" and "}}" are literal braces.
// A malformed pattern or a spec that does not fit its argument throws std::invalid_argument: these
// are programming errors in pasa's own strings, caught by the tests that run each message.
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>

namespace pasa::text {

// One argument, erased to the few kinds the formatter knows.
struct FormatArg {
  enum class Kind { signed_int, unsigned_int, floating, string, character, boolean } kind;
  union {
    long long i;
    unsigned long long u;
    double d;
    char c;
    bool b;
  };
  std::string_view s;

  template <typename T>
  FormatArg(const T& value) {  // NOLINT: implicit on purpose, format() converts each argument
    if constexpr (std::is_same_v<T, bool>) {
      kind = Kind::boolean;
      b = value;
    } else if constexpr (std::is_same_v<T, char>) {
      kind = Kind::character;
      c = value;
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      kind = Kind::signed_int;
      i = value;
    } else if constexpr (std::is_integral_v<T>) {
      kind = Kind::unsigned_int;
      u = value;
    } else if constexpr (std::is_floating_point_v<T>) {
      kind = Kind::floating;
      d = static_cast<double>(value);
    } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
      kind = Kind::string;
      s = std::string_view(value);
    } else {
      static_assert(std::is_arithmetic_v<T>, "format: argument must be a number, bool, char or string");
    }
  }
};

std::string vformat(std::string_view pattern, std::initializer_list<FormatArg> args);

template <typename... Args>
std::string format(std::string_view pattern, const Args&... args) {
  return vformat(pattern, {FormatArg(args)...});
}

// (a null stream: nothing is written)
template <typename... Args>
void print(std::FILE* stream, std::string_view pattern, const Args&... args) {
  if (stream == nullptr) return;
  const std::string text = vformat(pattern, {FormatArg(args)...});
  std::fwrite(text.data(), 1, text.size(), stream);
}

// Where print(pattern, ...) writes: standard output, or standard error for a command of the CLI that
// writes a file to standard output (`pasa study --json /dev/stdout`), so that it holds the file alone;
// nowhere where both are that file.
inline std::FILE*& report_stream() {
  static std::FILE* stream = stdout;
  return stream;
}

// Where the CLI's progress and notes go: standard error, or nowhere for a command that writes a file
// to standard error (`pasa run --out /dev/stderr`).
inline std::FILE*& progress_stream() {
  static std::FILE* stream = stderr;
  return stream;
}

template <typename... Args>
void print(std::string_view pattern, const Args&... args) {
  print(report_stream(), pattern, args...);
}

// The elements of a string range joined by a separator.
template <typename Range>
std::string join(const Range& items, std::string_view separator) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    out += item;
    first = false;
  }
  return out;
}

}  // namespace pasa::text
