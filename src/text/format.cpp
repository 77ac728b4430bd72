// SPDX-License-Identifier: Apache-2.0
#include "text/format.h"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <system_error>

namespace pasa::text {
namespace {

struct Spec {
  char fill = ' ';
  char align = '\0';  // '<', '>', '^' or none (the kind's default)
  char sign = '-';
  bool zero_pad = false;
  int width = 0;
  int precision = -1;
  char type = '\0';
};

[[noreturn]] void fail(std::string_view pattern, const std::string& why) {
  throw std::invalid_argument("format pattern \"" + std::string(pattern) + "\": " + why);
}

bool is_align(char c) { return c == '<' || c == '>' || c == '^'; }

int parse_number(std::string_view spec, std::size_t& pos) {
  int value = 0;
  while (pos < spec.size() && spec[pos] >= '0' && spec[pos] <= '9') {
    value = value * 10 + (spec[pos++] - '0');
    if (value > 10000) throw std::invalid_argument("format: width or precision over 10000");
  }
  return value;
}

Spec parse_spec(std::string_view spec, std::string_view pattern) {
  Spec out;
  std::size_t pos = 0;
  if (spec.size() >= 2 && is_align(spec[1])) {
    out.fill = spec[0];
    out.align = spec[1];
    pos = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    out.align = spec[0];
    pos = 1;
  }
  if (pos < spec.size() && (spec[pos] == '+' || spec[pos] == '-')) out.sign = spec[pos++];
  if (pos < spec.size() && spec[pos] == '0') {
    out.zero_pad = true;
    ++pos;
  }
  out.width = parse_number(spec, pos);
  if (pos < spec.size() && spec[pos] == '.') {
    ++pos;
    if (pos == spec.size() || spec[pos] < '0' || spec[pos] > '9') fail(pattern, "'.' without a precision");
    out.precision = parse_number(spec, pos);
  }
  if (pos < spec.size()) out.type = spec[pos++];
  if (pos != spec.size()) fail(pattern, "unknown format spec '" + std::string(spec) + "'");
  return out;
}

// Shortest digits that read back as x: fixed notation for decimal exponents in [-4, 16), scientific
// (at least two exponent digits) outside, as Python's repr does, without a trailing ".0".
std::string shortest(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);  // [-]d[.ddd]e(+|-)XX
  const std::size_t e_pos = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (std::size_t k = negative ? 1 : 0; k < e_pos; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string body = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      body.append("0.").append(static_cast<std::size_t>(-exponent - 1), '0').append(digits);
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      body.append(digits).append(static_cast<std::size_t>(exponent + 1) - digits.size(), '0');
    } else {
      const auto point = static_cast<std::size_t>(exponent + 1);
      body.append(digits, 0, point).append(".").append(digits, point);
    }
  } else {
    body += digits[0];
    if (digits.size() > 1) body.append(".").append(digits, 1);
    char exp_text[16];
    std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    body += exp_text;
  }
  return body;
}

std::string format_floating(double x, const Spec& spec, std::string_view pattern) {
  if (std::isnan(x)) return std::signbit(x) ? "-nan" : "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (spec.type == '\0' && spec.precision < 0) return shortest(x);
  char conversion = spec.type == '\0' ? 'g' : spec.type;
  if (conversion != 'f' && conversion != 'e' && conversion != 'g') {
    fail(pattern, std::string("type '") + spec.type + "' does not apply to a floating-point value");
  }
  const char printf_pattern[] = {'%', '.', '*', conversion, '\0'};
  const int precision = spec.precision < 0 ? 6 : spec.precision;
  const int n = std::snprintf(nullptr, 0, printf_pattern, precision, x);
  std::string out(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), printf_pattern, precision, x);
  out.pop_back();
  return out;
}

std::string format_integer(unsigned long long magnitude, bool negative, const Spec& spec, std::string_view pattern) {
  int base = 10;
  bool upper = false;
  switch (spec.type) {
    case '\0':
    case 'd': break;
    case 'x': base = 16; break;
    case 'X': base = 16; upper = true; break;
    case 'b': base = 2; break;
    default: fail(pattern, std::string("type '") + spec.type + "' does not apply to an integer");
  }
  if (spec.precision >= 0) fail(pattern, "an integer takes no precision");
  char buf[72];
  const auto r = std::to_chars(buf, buf + sizeof buf, magnitude, base);
  std::string digits(buf, r.ptr);
  if (upper) {
    for (char& ch : digits) ch = static_cast<char>(ch >= 'a' && ch <= 'f' ? ch - 'a' + 'A' : ch);
  }
  return negative ? "-" + digits : digits;
}

std::string pad(std::string body, const Spec& spec, bool numeric) {
  if (numeric && spec.sign == '+' && !body.empty() && body[0] != '-') body = "+" + body;
  const std::size_t width = static_cast<std::size_t>(spec.width);
  if (body.size() >= width) return body;
  const std::size_t missing = width - body.size();
  if (numeric && spec.zero_pad && spec.align == '\0') {
    const std::size_t sign_chars = !body.empty() && (body[0] == '-' || body[0] == '+') ? 1 : 0;
    return body.substr(0, sign_chars) + std::string(missing, '0') + body.substr(sign_chars);
  }
  const char align = spec.align != '\0' ? spec.align : (numeric ? '>' : '<');
  if (align == '<') return body + std::string(missing, spec.fill);
  if (align == '>') return std::string(missing, spec.fill) + body;
  return std::string(missing / 2, spec.fill) + body + std::string(missing - missing / 2, spec.fill);
}

std::string format_arg(const FormatArg& arg, const Spec& spec, std::string_view pattern) {
  using Kind = FormatArg::Kind;
  switch (arg.kind) {
    case Kind::signed_int: {
      const bool negative = arg.i < 0;
      const unsigned long long magnitude =
          negative ? 0ULL - static_cast<unsigned long long>(arg.i) : static_cast<unsigned long long>(arg.i);
      return pad(format_integer(magnitude, negative, spec, pattern), spec, true);
    }
    case Kind::unsigned_int: return pad(format_integer(arg.u, false, spec, pattern), spec, true);
    case Kind::floating: return pad(format_floating(arg.d, spec, pattern), spec, true);
    case Kind::string:
    case Kind::character:
    case Kind::boolean: {
      if (spec.type != '\0' && spec.type != 's' && !(arg.kind == Kind::character && spec.type == 'c')) {
        fail(pattern, std::string("type '") + spec.type + "' does not apply to a string");
      }
      std::string body = arg.kind == Kind::string      ? std::string(arg.s)
                         : arg.kind == Kind::character ? std::string(1, arg.c)
                                                       : std::string(arg.b ? "true" : "false");
      if (spec.precision >= 0 && body.size() > static_cast<std::size_t>(spec.precision)) {
        body.resize(static_cast<std::size_t>(spec.precision));
      }
      return pad(std::move(body), spec, false);
    }
  }
  fail(pattern, "unknown argument kind");
}

}  // namespace

std::string vformat(std::string_view pattern, std::initializer_list<FormatArg> args) {
  std::string out;
  out.reserve(pattern.size() + 16 * args.size());
  std::size_t next_arg = 0;
  for (std::size_t pos = 0; pos < pattern.size(); ++pos) {
    const char ch = pattern[pos];
    if (ch == '}') {
      if (pos + 1 < pattern.size() && pattern[pos + 1] == '}') {
        out += '}';
        ++pos;
        continue;
      }
      fail(pattern, "unmatched '}'");
    }
    if (ch != '{') {
      out += ch;
      continue;
    }
    if (pos + 1 < pattern.size() && pattern[pos + 1] == '{') {
      out += '{';
      ++pos;
      continue;
    }
    const std::size_t close = pattern.find('}', pos);
    if (close == std::string_view::npos) fail(pattern, "unmatched '{'");
    const std::string_view field = pattern.substr(pos + 1, close - pos - 1);
    const std::size_t colon = field.find(':');
    const std::string_view index_text = field.substr(0, colon);
    std::size_t index = next_arg++;
    if (!index_text.empty()) {
      const auto r = std::from_chars(index_text.data(), index_text.data() + index_text.size(), index);
      if (r.ec != std::errc() || r.ptr != index_text.data() + index_text.size()) {
        fail(pattern, "bad argument index '" + std::string(index_text) + "'");
      }
    }
    if (index >= args.size()) fail(pattern, "argument " + std::to_string(index) + " is missing");
    const Spec spec = colon == std::string_view::npos ? Spec{} : parse_spec(field.substr(colon + 1), pattern);
    out += format_arg(*(args.begin() + index), spec, pattern);
    pos = close;
  }
  return out;
}

}  // namespace pasa::text
