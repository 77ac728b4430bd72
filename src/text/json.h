// SPDX-License-Identifier: Apache-2.0
// A small JSON value (RFC 8259) for .safetensors headers, calibration plans and the CLI's result files,
// so the library needs nothing beyond the standard library.
//
// Parsing is strict and meant for untrusted input: UTF-8 is validated, nesting is limited, duplicate
// object keys are rejected (a header naming a tensor twice is ambiguous), and a number is kept as a
// signed or unsigned 64-bit integer when it is one and fits, else as a double. Objects keep their keys
// sorted, so dumping is deterministic.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace pasa::text {

// Malformed text, or a value of the wrong type where an accessor expected another.
class JsonError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::map<std::string, Json, std::less<>>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  Json(int i) : value_(std::int64_t{i}) {}
  Json(long i) : value_(static_cast<std::int64_t>(i)) {}
  Json(long long i) : value_(static_cast<std::int64_t>(i)) {}
  Json(unsigned u) : value_(std::int64_t{u}) {}
  Json(unsigned long u) : Json(static_cast<unsigned long long>(u)) {}
  Json(unsigned long long u);
  Json(double d) : value_(d) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(std::string_view s) : value_(std::string(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  Json(Object o) : value_(std::move(o)) {}
  template <typename T>
  Json(const std::vector<T>& items) : value_(Array(items.begin(), items.end())) {}

  static Json array(std::initializer_list<Json> items = {}) { return Json(Array(items)); }
  static Json object(std::initializer_list<std::pair<const std::string, Json>> members = {}) {
    return Json(Object(members));
  }

  // Strict parse of a whole document (only whitespace may follow the value).
  static Json parse(std::string_view text);

  // Compact text, or with `indent` spaces per level when indent >= 0. NaN and infinities become null.
  // Throws JsonError when a string is not valid UTF-8.
  std::string dump(int indent = -1) const;

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value_); }
  bool is_bool() const { return std::holds_alternative<bool>(value_); }
  bool is_integer() const {
    return std::holds_alternative<std::int64_t>(value_) || std::holds_alternative<std::uint64_t>(value_);
  }
  bool is_number() const { return is_integer() || std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  bool is_array() const { return std::holds_alternative<Array>(value_); }
  bool is_object() const { return std::holds_alternative<Object>(value_); }
  // "null", "boolean", "number", "string", "array" or "object".
  const char* type_name() const;

  // Typed access; each throws JsonError naming the expected and the actual type.
  bool as_bool() const;
  std::int64_t as_int64() const;    // an integer within int64's range
  std::uint64_t as_uint64() const;  // a non-negative integer
  double as_double() const;         // any number
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;

  // The member named `key`, or nullptr when this is not an object or has no such member.
  const Json* find(std::string_view key) const;
  // The member named `key`; throws JsonError when it is missing.
  const Json& at(std::string_view key) const;
  // The member named `key`, created as null if missing; a null value becomes an object first.
  Json& operator[](const std::string& key);
  // Appends to an array; a null value becomes an array first.
  void push_back(Json item);

  friend bool operator==(const Json& a, const Json& b);

 private:
  std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, Array, Object> value_;
};

}  // namespace pasa::text
