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
#include <functional>
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

// One scalar from its text: the whole text must be the value.
template <typename T>
T parse_scalar(const std::string& text, const std::string& option) {
  if constexpr (std::is_same_v<T, std::string>) {
    return text;
  } else {
    static_assert(std::is_arithmetic_v<T>, "options are strings, numbers or lists/optionals of them");
    T value{};
    const auto r = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size()) {
      throw UsageError(option + ": '" + text + "' is not " +
                       (std::is_integral_v<T> ? "an integer" : "a number") + " in range");
    }
    return value;
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
  bool given() const { return seen_; }    // on the command line (after parsing)

 private:
  friend class Command;
  std::string name_, description_, default_text_;
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
      opt.assign_ = [&target, name](const std::string& text) {
        target.push_back(detail::parse_scalar<Element>(text, name));
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
      opt.assign_ = [&target, name](const std::string& text) { target = detail::parse_scalar<Element>(text, name); };
      opt.current_text_ = [&target] { return target ? detail::scalar_text(*target) : std::string(); };
    } else {
      opt.assign_ = [&target, name](const std::string& text) { target = detail::parse_scalar<T>(text, name); };
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
