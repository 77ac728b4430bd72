// SPDX-License-Identifier: Apache-2.0
// The pasa command's argument parser: nested subcommands with `--name value` / `--name=value` options,
// boolean flags, comma-separated lists and generated --help. It is the project's own so the CLI builds
// from the standard library alone (the wheel ships it; PyPI has no C++ argument parser to build against).
//
//   Command app("pasa", "what it does");
//   Command* run = app.add_subcommand("run", "what run does");
//   run->add_option("--seq", opt.seq, "sequence length")->capture_default_str();
//   run->add_flag("--causal", opt.causal, "causal mask");
//   run->add_option("--alignment", opt.alignment, "...")->needs(causal);   // causal: the flag's Option*
//   run->callback([&] { ... });
//   return app.main(argc, argv);   // parses, runs the chosen command's callback, maps errors to codes
#pragma once

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace pasa::cli {

// A command line that does not fit the commands' options; its message names the option. The parser
// throws it, and so does a command's callback for an option value it checks itself (before any work:
// a value out of the option's range, a policy that does not parse); Command::main prints both alike.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename T>
struct is_vector<std::vector<T>> : std::true_type {};
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

// Why `text`, which does not parse as a T, is a number past T's range ("must be at most 2147483647"),
// or nothing: an integer literal too long for T, a whole number in a double's syntax beyond it (1e400,
// -1 for an unsigned T), or a double's syntax past a double's range.
template <typename T>
std::optional<std::string> past_range(const std::string& text) {
  const char* end = text.data() + text.size();
  if constexpr (std::is_integral_v<T>) {
    const auto limit = [](bool negative) {
      return negative ? "must be at least " + std::to_string(std::numeric_limits<T>::min())
                      : "must be at most " + std::to_string(std::numeric_limits<T>::max());
    };
    T value{};
    const auto r = std::from_chars(text.data(), end, value);
    if (r.ec == std::errc::result_out_of_range && r.ptr == end) return limit(text[0] == '-');
    double x = 0;
    const auto d = std::from_chars(text.data(), end, x);
    if (d.ptr != end || (d.ec != std::errc() && d.ec != std::errc::result_out_of_range)) return std::nullopt;
    // Past a double's range, or below its smallest subnormal (not a whole number then).
    if (d.ec == std::errc::result_out_of_range) x = std::strtod(text.c_str(), nullptr);
    if (x != std::floor(x)) return std::nullopt;  // (NaN included)
    // T's limits are -2^digits (signed) or 0, and 2^digits - 1: exact as doubles, unlike the maximum.
    const double top = std::ldexp(1.0, std::numeric_limits<T>::digits);
    if (x >= top || x < (std::is_signed_v<T> ? -top : 0.0)) return limit(x < 0);
    return std::nullopt;
  } else {
    double x = 0;
    const auto r = std::from_chars(text.data(), end, x);
    if (r.ec != std::errc::result_out_of_range || r.ptr != end) return std::nullopt;
    if (!std::isinf(std::strtod(text.c_str(), nullptr))) return std::nullopt;  // an underflow
    return "a double's largest magnitude is 1.79769e+308";
  }
}

// One scalar from its text: the whole text must be the value. A number past what T holds is out of
// range, named with `range` (the option's own, Option::range) or else with T's limit. A double below
// the smallest subnormal rounds to 0, as strtod rounds it.
template <typename T>
T parse_scalar(const std::string& text, const std::string& option, const std::string& range) {
  if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else {
    static_assert(std::is_arithmetic_v<T>, "options are strings, numbers or lists/optionals of them");
    T value{};
    const char* end = text.data() + text.size();
    const auto r = std::from_chars(text.data(), end, value);
    if (!text.empty() && r.ec == std::errc() && r.ptr == end) return value;
    if (const std::optional<std::string> why = past_range<T>(text)) {
      throw UsageError(option + ": " + text + " is out of range (" + (range.empty() ? *why : range) + ")");
    }
    if constexpr (std::is_floating_point_v<T>) {  // below the smallest subnormal: 0
      if (r.ec == std::errc::result_out_of_range && r.ptr == end) {
        return static_cast<T>(std::strtod(text.c_str(), nullptr));
      }
    } else {
      // A whole number in a double's syntax (1e4, 4096.0), as policy fields take them; past_range has
      // refused those beyond T.
      double x = 0;
      const auto d = std::from_chars(text.data(), end, x);
      if (!text.empty() && d.ec == std::errc() && d.ptr == end && x == std::floor(x)) return static_cast<T>(x);
    }
    throw UsageError(option + ": '" + text + "' is not " + (std::is_integral_v<T> ? "an integer" : "a number"));
  }
}

template <typename T>
std::string scalar_text(const T& value) {
  if constexpr (std::is_same_v<T, std::string>) {
    return value;
  } else {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, value);
    return std::string(buf, r.ptr);
  }
}

}  // namespace detail

// An option's value may not be empty, and an option that takes one value may be given once: a second
// value, or an empty one, would otherwise be dropped without a word.
class Option {
 public:
  Option* capture_default_str();  // --help shows the value the target holds before parsing
  Option* delimiter(char separator);  // a list option splits each value at this character
  Option* required();
  Option* excludes(const Option* other);  // a usage error when both are given (either order)
  Option* needs(const Option* other);     // a usage error when this is given without `other`
  // The values a number option takes, as its command's check says them ("must be in 1..1024"): the
  // parser's message for a value past what the option's C++ type holds, which never reaches that check.
  Option* range(std::string text);
  bool given() const { return seen_; }    // on the command line (after parsing)

 private:
  friend class Command;
  std::string name_, description_, default_text_, range_;
  bool is_flag_ = false, is_list_ = false, required_ = false, seen_ = false;
  char delimiter_ = '\0';
  std::vector<const Option*> excludes_, needs_;
  std::function<void(const std::string&)> assign_;  // one value (or one list element)
  std::function<std::string()> current_text_;
  std::function<void()> clear_list_;  // a list option's first value replaces the default list
};

class Command {
 public:
  Command(std::string name, std::string description);

  Command* add_subcommand(const std::string& name, const std::string& description);

  template <typename T>
  Option* add_option(const std::string& name, T& target, const std::string& description) {
    Option& opt = new_option(name, description);
    if constexpr (detail::is_vector<T>::value) {
      using Element = typename T::value_type;
      opt.is_list_ = true;
      opt.assign_ = [&target, &opt](const std::string& text) {
        target.push_back(detail::parse_scalar<Element>(text, opt.name_, opt.range_));
      };
      opt.clear_list_ = [&target] { target.clear(); };
      opt.current_text_ = [&target] {
        std::string out;
        for (const auto& item : target) {
          if (!out.empty()) out += ',';
          out += detail::scalar_text(item);
        }
        return out;
      };
    } else if constexpr (detail::is_optional<T>::value) {
      using Element = typename T::value_type;
      opt.assign_ = [&target, &opt](const std::string& text) {
        target = detail::parse_scalar<Element>(text, opt.name_, opt.range_);
      };
      opt.current_text_ = [&target] { return target ? detail::scalar_text(*target) : std::string(); };
    } else {
      opt.assign_ = [&target, &opt](const std::string& text) {
        target = detail::parse_scalar<T>(text, opt.name_, opt.range_);
      };
      opt.current_text_ = [&target] { return detail::scalar_text(target); };
    }
    return &opt;
  }

  Option* add_flag(const std::string& name, bool& target, const std::string& description);

  // Runs after this command's options are parsed (and, for a parent, before its subcommand's).
  void callback(std::function<void()> fn) { callback_ = std::move(fn); }
  // The command line must name one of the subcommands.
  void require_subcommand() { subcommand_required_ = true; }
  // The subcommands that the parsed command line named (at most one).
  std::vector<const Command*> get_subcommands() const;
  // `--version` given to this command (before any subcommand) prints `text` and exits; --help lists it.
  void version(std::string text) { version_ = std::move(text); }

  std::string help() const;
  // Parses argv, runs the callbacks, prints a usage error (the parser's or a callback's) as one line
  // that points to the --help of the command it concerns; returns the process's exit code: 0, or 2 for
  // a usage error.
  int main(int argc, const char* const* argv);

 private:
  Option& new_option(const std::string& name, const std::string& description);
  // Parses args[pos...] for this command and (recursively) the chosen subcommand; returns the
  // command whose --help was asked for, or nullptr.
  const Command* parse(const std::vector<std::string>& args, std::size_t pos);
  // After a command's options are parsed: required, excluded and needed options.
  void check_option_rules() const;

  std::string name_, description_, path_, version_;
  bool version_asked_ = false;
  std::vector<std::unique_ptr<Option>> options_;
  std::vector<std::unique_ptr<Command>> subcommands_;
  std::function<void()> callback_;
  bool subcommand_required_ = false;
  Command* chosen_ = nullptr;
};

}  // namespace pasa::cli
