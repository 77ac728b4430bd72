// SPDX-License-Identifier: Apache-2.0
#include "capture_index.h"

#include <cmath>
#include <filesystem>

#include "io/byte_io.h"
#include "io/json_fields.h"
#include "pasa/error.h"
#include "text/json.h"

namespace pasa::cli {
namespace {

using text::Json;
using io::detail::bool_field;
using io::detail::member;
using io::detail::string_field;

constexpr std::uint64_t kMaxIndexBytes = std::uint64_t{1} << 30;  // (a capture of millions of calls)

CapturedCall parse_call(const Json& entry, const std::string& where) {
  if (!entry.is_object()) throw Error(where + ": " + entry.dump() + " is not an object");
  CapturedCall call;
  call.name = string_field(entry, "name", where);
  call.file = string_field(entry, "file", where);
  call.causal = bool_field(entry, "is_causal", where);
  const std::string alignment = string_field(entry, "causal_alignment", where);
  if (alignment != "top_left" && alignment != "bottom_right") {
    throw Error(where + ".causal_alignment: '" + alignment + "' is not top_left or bottom_right");
  }
  call.alignment = alignment == "top_left" ? CausalAlignment::top_left : CausalAlignment::bottom_right;
  const Json& scale = member(entry, "scale", where);
  // (pasa.capture writes a NaN or infinite scale as its text, strict JSON having no such numbers: the
  // call is read as made, and refused where it is run)
  if (scale.is_string() && (scale.as_string() == "nan" || scale.as_string() == "inf" || scale.as_string() == "-inf")) {
    call.scale = scale.as_string() == "nan" ? std::nan("") : scale.as_string() == "inf" ? HUGE_VAL : -HUGE_VAL;
  } else if (!scale.is_null()) {
    if (!scale.is_number() || !std::isfinite(scale.as_double())) {
      throw Error(where + ".scale: " + scale.dump() + " is not a number, null, or one of \"nan\", \"inf\", \"-inf\"");
    }
    call.scale = scale.as_double();
  }
  call.masked = bool_field(entry, "attn_mask", where);
  return call;
}

}  // namespace

std::optional<std::vector<CapturedCall>> read_capture_index(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "index.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const io::detail::InputFile file(path);
  if (file.size() > kMaxIndexBytes) {
    throw Error(path + ": " + std::to_string(file.size()) + " bytes, too large for an index");
  }
  const std::vector<std::uint8_t> bytes = file.read(0, file.size());
  Json index;
  try {
    index = Json::parse(std::string(bytes.begin(), bytes.end()));
  } catch (const text::JsonError& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  const Json* format = index.is_object() ? index.find("format") : nullptr;
  if (format == nullptr || !format->is_string() || format->as_string() != "pasa-capture-1") {
    throw Error(path + ": not a pasa.capture index (format pasa-capture-1)");
  }
  const Json& entries = member(index, "entries", path);
  if (!entries.is_array()) throw Error(path + ".entries: " + io::detail::kind_of(entries) + ", not an array");
  if (entries.as_array().empty()) throw Error(path + ": lists no calls (the captured code ran no attention)");
  std::vector<CapturedCall> calls;
  for (std::size_t i = 0; i < entries.as_array().size(); ++i) {
    calls.push_back(parse_call(entries.as_array()[i], path + ": entries[" + std::to_string(i) + "]"));
  }
  return calls;
}

}  // namespace pasa::cli
