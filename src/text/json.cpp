// SPDX-License-Identifier: Apache-2.0
#include "text/json.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

namespace pasa::text {
namespace {

// Deep enough for any header or plan; shallow enough that recursion cannot exhaust the stack.
constexpr int kMaxDepth = 128;

// Length of the valid UTF-8 sequence starting at text[pos], or 0 if it is not one (overlong forms,
// surrogates and code points above U+10FFFF are invalid).
std::size_t utf8_sequence_length(std::string_view text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(pos);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + n > text.size()) return 0;
  if (byte(pos + 1) < lo || byte(pos + 1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i) {
    if (byte(pos + i) < 0x80 || byte(pos + i) > 0xBF) return 0;
  }
  return n;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json document() {
    Json value = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("unexpected text after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw JsonError("JSON parse error at byte " + std::to_string(pos_) + ": " + why);
  }

  void skip_whitespace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume(char c) {
    skip_whitespace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  Json parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting deeper than " + std::to_string(kMaxDepth));
    skip_whitespace();
    if (pos_ == text_.size()) fail("unexpected end of text");
    switch (text_[pos_]) {
      case '{': return parse_object(depth);
      case '[': return parse_array(depth);
      case '"': return Json(parse_string());
      case 't': expect_literal("true"); return Json(true);
      case 'f': expect_literal("false"); return Json(false);
      case 'n': expect_literal("null"); return Json(nullptr);
      default: return parse_number();
    }
  }

  Json parse_object(int depth) {
    ++pos_;  // '{'
    Json::Object members;
    if (consume('}')) return Json(std::move(members));
    do {
      skip_whitespace();
      if (pos_ == text_.size() || text_[pos_] != '"') fail("expected a string key");
      std::string key = parse_string();
      if (!consume(':')) fail("expected ':' after a key");
      if (members.count(key)) fail("duplicate key \"" + key + "\"");
      members.emplace(std::move(key), parse_value(depth + 1));
    } while (consume(','));
    if (!consume('}')) fail("expected ',' or '}' in an object");
    return Json(std::move(members));
  }

  Json parse_array(int depth) {
    ++pos_;  // '['
    Json::Array items;
    if (consume(']')) return Json(std::move(items));
    do {
      items.push_back(parse_value(depth + 1));
    } while (consume(','));
    if (!consume(']')) fail("expected ',' or ']' in an array");
    return Json(std::move(items));
  }

  std::uint32_t parse_hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    std::uint32_t value = 0;
    const auto r = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, value, 16);
    if (r.ec != std::errc() || r.ptr != text_.data() + pos_ + 4) fail("invalid \\u escape");
    pos_ += 4;
    return value;
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ == text_.size()) fail("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        const std::size_t n = utf8_sequence_length(text_, pos_);
        if (n == 0) fail("invalid UTF-8 in a string");
        out.append(text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      if (++pos_ == text_.size()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = parse_hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") fail("high surrogate without its low half");
            pos_ += 2;
            const std::uint32_t low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("invalid escape");
      }
    }
  }

  // RFC 8259's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  Json parse_number() {
    const std::size_t start = pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    const bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    const std::size_t int_start = pos_;
    const std::size_t int_digits = digits();
    if (int_digits == 0) fail("invalid value");
    if (int_digits > 1 && text_[int_start] == '0') fail("leading zero in a number");
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("no digits after the decimal point");
      integral = false;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("no digits in the exponent");
      integral = false;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      if (negative) {
        std::int64_t v = 0;
        if (std::from_chars(first, last, v).ec == std::errc()) return Json(static_cast<long long>(v));
      } else {
        std::uint64_t v = 0;
        if (std::from_chars(first, last, v).ec == std::errc()) return Json(static_cast<unsigned long long>(v));
      }
    }
    double d = 0;
    const auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) fail("number out of range");
    if (r.ec != std::errc() || r.ptr != last) fail("invalid number");
    return Json(d);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (std::size_t pos = 0; pos < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[pos]);
    if (c >= 0x80) {
      const std::size_t n = utf8_sequence_length(s, pos);
      if (n == 0) throw JsonError("string is not valid UTF-8 at byte " + std::to_string(pos));
      out.append(s, pos, n);
      pos += n;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static const char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++pos;
  }
  out += '"';
}

// Shortest text that reads back as the same double, with ".0" on integral values so they stay doubles.
void dump_double(double d, std::string& out) {
  if (!std::isfinite(d)) {
    out += "null";
    return;
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d);
  const std::string_view text(buf, static_cast<std::size_t>(r.ptr - buf));
  out += text;
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
}

void newline(std::string& out, int indent, int level) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<std::size_t>(indent * level), ' ');
}

}  // namespace

Json::Json(unsigned long long u) {
  if (u <= static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max())) {
    value_ = static_cast<std::int64_t>(u);
  } else {
    value_ = static_cast<std::uint64_t>(u);
  }
}

Json Json::parse(std::string_view text) { return Parser(text).document(); }

const char* Json::type_name() const {
  if (is_null()) return "null";
  if (is_bool()) return "boolean";
  if (is_number()) return "number";
  if (is_string()) return "string";
  if (is_array()) return "array";
  return "object";
}

namespace {
[[noreturn]] void wrong_type(const char* expected, const Json& got) {
  throw JsonError(std::string("expected ") + expected + ", got a " + got.type_name());
}
}  // namespace

bool Json::as_bool() const {
  if (!is_bool()) wrong_type("a boolean", *this);
  return std::get<bool>(value_);
}

std::int64_t Json::as_int64() const {
  if (const auto* i = std::get_if<std::int64_t>(&value_)) return *i;
  if (is_integer()) throw JsonError("integer " + std::to_string(std::get<std::uint64_t>(value_)) + " out of range");
  wrong_type("an integer", *this);
}

std::uint64_t Json::as_uint64() const {
  if (const auto* u = std::get_if<std::uint64_t>(&value_)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&value_)) {
    if (*i < 0) throw JsonError("expected a non-negative integer, got " + std::to_string(*i));
    return static_cast<std::uint64_t>(*i);
  }
  wrong_type("a non-negative integer", *this);
}

double Json::as_double() const {
  if (const auto* d = std::get_if<double>(&value_)) return *d;
  if (const auto* i = std::get_if<std::int64_t>(&value_)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&value_)) return static_cast<double>(*u);
  wrong_type("a number", *this);
}

const std::string& Json::as_string() const {
  if (!is_string()) wrong_type("a string", *this);
  return std::get<std::string>(value_);
}

const Json::Array& Json::as_array() const {
  if (!is_array()) wrong_type("an array", *this);
  return std::get<Array>(value_);
}

const Json::Object& Json::as_object() const {
  if (!is_object()) wrong_type("an object", *this);
  return std::get<Object>(value_);
}

const Json* Json::find(std::string_view key) const {
  const auto* members = std::get_if<Object>(&value_);
  if (members == nullptr) return nullptr;
  const auto it = members->find(key);
  return it == members->end() ? nullptr : &it->second;
}

const Json& Json::at(std::string_view key) const {
  if (!is_object()) wrong_type("an object", *this);
  const Json* member = find(key);
  if (member == nullptr) throw JsonError("missing member \"" + std::string(key) + "\"");
  return *member;
}

Json& Json::operator[](const std::string& key) {
  if (is_null()) value_ = Object{};
  if (!is_object()) wrong_type("an object", *this);
  return std::get<Object>(value_)[key];
}

void Json::push_back(Json item) {
  if (is_null()) value_ = Array{};
  if (!is_array()) wrong_type("an array", *this);
  std::get<Array>(value_).push_back(std::move(item));
}

bool operator==(const Json& a, const Json& b) { return a.value_ == b.value_; }

std::string Json::dump(int indent) const {
  std::string out;
  struct Writer {
    int indent;
    std::string& out;
    void write(const Json& j, int level) {
      if (j.is_null()) {
        out += "null";
      } else if (j.is_bool()) {
        out += j.as_bool() ? "true" : "false";
      } else if (const auto* i = std::get_if<std::int64_t>(&j.value_)) {
        out += std::to_string(*i);
      } else if (const auto* u = std::get_if<std::uint64_t>(&j.value_)) {
        out += std::to_string(*u);
      } else if (const auto* d = std::get_if<double>(&j.value_)) {
        dump_double(*d, out);
      } else if (j.is_string()) {
        dump_string(j.as_string(), out);
      } else if (j.is_array()) {
        const Array& items = j.as_array();
        out += '[';
        for (std::size_t k = 0; k < items.size(); ++k) {
          if (k > 0) out += ',';
          newline(out, indent, level + 1);
          write(items[k], level + 1);
        }
        if (!items.empty()) newline(out, indent, level);
        out += ']';
      } else {
        const Object& members = j.as_object();
        out += '{';
        bool first = true;
        for (const auto& [key, value] : members) {
          if (!first) out += ',';
          first = false;
          newline(out, indent, level + 1);
          dump_string(key, out);
          out += indent < 0 ? ":" : ": ";
          write(value, level + 1);
        }
        if (!members.empty()) newline(out, indent, level);
        out += '}';
      }
    }
  };
  Writer{indent, out}.write(*this, 0);
  return out;
}

}  // namespace pasa::text
