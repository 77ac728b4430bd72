// SPDX-License-Identifier: Apache-2.0
// Fields of an untrusted JSON document (a mixing plan, a capture's index), each failure a pasa::Error
// naming where in which file.
#pragma once

#include <string>

#include "pasa/error.h"
#include "text/json.h"

namespace pasa::io::detail {

// "an array", "a number", ...: a JSON value's kind for a message.
inline std::string kind_of(const text::Json& value) {
  const std::string name = value.type_name();
  return (name == "array" || name == "object" ? "an " : "a ") + name;
}

inline const text::Json& member(const text::Json& object, const char* key, const std::string& where) {
  const text::Json* value = object.find(key);
  if (value == nullptr) throw Error(where + ": missing \"" + key + "\"");
  return *value;
}

inline std::string string_field(const text::Json& object, const char* key, const std::string& where) {
  const text::Json& value = member(object, key, where);
  if (!value.is_string()) throw Error(where + "." + key + ": " + kind_of(value) + ", not a string");
  return value.as_string();
}

inline bool bool_field(const text::Json& object, const char* key, const std::string& where) {
  const text::Json& value = member(object, key, where);
  if (!value.is_bool()) throw Error(where + "." + key + ": " + kind_of(value) + ", not true or false");
  return value.as_bool();
}

}  // namespace pasa::io::detail
