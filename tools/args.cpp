// SPDX-License-Identifier: Apache-2.0
#include "args.h"

#include <algorithm>
#include <cstdio>

namespace pasa::cli {

Option* Option::capture_default_str() {
  default_text_ = current_text_();
  return this;
}

Option* Option::delimiter(char separator) {
  delimiter_ = separator;
  return this;
}

Option* Option::range(std::string text) {
  range_ = std::move(text);
  return this;
}

Option* Option::required() {
  required_ = true;
  return this;
}

Option* Option::excludes(const Option* other) {
  excludes_.push_back(other);
  return this;
}

Option* Option::needs(const Option* other) {
  needs_.push_back(other);
  return this;
}

Command::Command(std::string name, std::string description)
    : name_(std::move(name)), description_(std::move(description)), path_(name_) {}

Command* Command::add_subcommand(const std::string& name, const std::string& description) {
  subcommands_.push_back(std::make_unique<Command>(name, description));
  subcommands_.back()->path_ = path_ + " " + name;
  return subcommands_.back().get();
}

Option& Command::new_option(const std::string& name, const std::string& description) {
  options_.push_back(std::make_unique<Option>());
  options_.back()->name_ = name;
  options_.back()->description_ = description;
  return *options_.back();
}

Option* Command::add_flag(const std::string& name, bool& target, const std::string& description) {
  Option& opt = new_option(name, description);
  opt.is_flag_ = true;
  opt.assign_ = [&target](const std::string&) { target = true; };
  opt.current_text_ = [] { return std::string(); };
  return &opt;
}

std::vector<const Command*> Command::get_subcommands() const {
  if (chosen_ == nullptr) return {};
  return {chosen_};
}

std::string Command::help() const {
  std::string out = path_ + ": " + description_ + "\n\nUsage: " + path_ +
                    (subcommands_.empty() ? "" : (subcommand_required_ ? " COMMAND" : " [COMMAND]")) +
                    " [options]\n\nOptions:\n";
  // Two columns: the name at 2, the description from column 28, wrapped at 100.
  const auto row = [&out](const std::string& left, const std::string& right) {
    out += "  " + left;
    std::size_t column = 2 + left.size();
    if (column >= 28) {
      out += '\n';
      column = 0;
    }
    out.append(28 - column, ' ');
    column = 28;
    std::size_t pos = 0;
    while (pos < right.size()) {
      std::size_t end = right.find(' ', pos);
      if (end == std::string::npos) end = right.size();
      const std::size_t word = end - pos;
      if (column > 28 && column + 1 + word > 100) {
        out += "\n" + std::string(28, ' ');
        column = 28;
      } else if (column > 28) {
        out += ' ';
        ++column;
      }
      out.append(right, pos, word);
      column += word;
      pos = end + 1;
    }
    out += '\n';
  };
  row("-h, --help", "print this help and exit");
  if (!version_.empty()) row("--version", "print the version and exit");
  for (const auto& opt : options_) {
    std::string left = opt->name_;
    if (!opt->is_flag_) left += opt->is_list_ ? " LIST" : " VALUE";
    std::string right = opt->description_;
    if (opt->required_) right += " (required)";
    if (!opt->default_text_.empty()) right += " [default: " + opt->default_text_ + "]";
    row(left, right);
  }
  if (!subcommands_.empty()) {
    out += "\nCommands:\n";
    for (const auto& sub : subcommands_) row(sub->name_, sub->description_);
    out += "\n'" + path_ + " COMMAND --help' describes a command.\n";
  }
  return out;
}

void Command::check_option_rules() const {
  for (const auto& opt : options_) {
    if (opt->required_ && !opt->seen_) throw UsageError(opt->name_ + " is required");
    if (!opt->seen_) continue;
    for (const Option* other : opt->excludes_) {
      if (other->seen_) throw UsageError(opt->name_ + " cannot be combined with " + other->name_);
    }
    for (const Option* other : opt->needs_) {
      if (!other->seen_) throw UsageError(opt->name_ + " needs " + other->name_);
    }
  }
}

const Command* Command::parse(const std::vector<std::string>& args, std::size_t pos) {
  for (; pos < args.size(); ++pos) {
    const std::string& arg = args[pos];
    if (arg == "-h" || arg == "--help") return this;
    if (arg == "--version" && !version_.empty()) {
      version_asked_ = true;
      return nullptr;
    }
    if (arg.rfind("--", 0) == 0) {
      const std::size_t eq = arg.find('=');
      const std::string name = arg.substr(0, eq);
      const auto it = std::find_if(options_.begin(), options_.end(), [&](const auto& o) { return o->name_ == name; });
      if (it == options_.end()) throw UsageError("'" + path_ + "' has no option " + name);
      Option& opt = **it;
      if (opt.is_flag_) {
        if (eq != std::string::npos) throw UsageError(name + " is a flag and takes no value");
        opt.assign_("");
      } else {
        std::string value;
        if (eq != std::string::npos) {
          value = arg.substr(eq + 1);
        } else if (pos + 1 < args.size()) {
          // A value taken from the next argument is never an option: "--lse --causal" means a
          // forgotten value, not a file named --causal (which --lse=--causal still names).
          if (args[pos + 1].rfind("--", 0) == 0) {
            throw UsageError(name + " needs a value (the next argument, " + args[pos + 1] + ", is an option; " +
                             name + "=VALUE gives a value that begins with --)");
          }
          value = args[++pos];
        } else {
          throw UsageError(name + " needs a value");
        }
        const auto assign = [&](const std::string& text) {
          if (text.empty()) throw UsageError(name + ": empty value");
          opt.assign_(text);
        };
        if (opt.is_list_) {
          if (!opt.seen_) opt.clear_list_();  // given values replace the defaults
          std::size_t start = 0;
          while (true) {
            const std::size_t end = opt.delimiter_ ? value.find(opt.delimiter_, start) : std::string::npos;
            assign(value.substr(start, end == std::string::npos ? std::string::npos : end - start));
            if (end == std::string::npos) break;
            start = end + 1;
          }
        } else {
          if (opt.seen_) throw UsageError(name + " is given more than once; it takes one value");
          assign(value);
        }
      }
      opt.seen_ = true;
      continue;
    }
    const auto sub = std::find_if(subcommands_.begin(), subcommands_.end(), [&](const auto& c) { return c->name_ == arg; });
    if (sub == subcommands_.end()) {
      throw UsageError("'" + path_ + "' takes no argument '" + arg + "'" +
                       (subcommands_.empty() ? std::string() : " (not one of its commands)"));
    }
    chosen_ = sub->get();
    // This command's options would be ignored: the chosen command runs instead of it.
    for (const auto& opt : options_) {
      if (opt->seen_) {
        throw UsageError(opt->name_ + " is an option of '" + path_ + "' itself, which '" + chosen_->path_ +
                         "' runs instead of; give that command's options after '" + arg + "'");
      }
    }
    break;
  }
  check_option_rules();
  if (chosen_ != nullptr) return chosen_->parse(args, pos + 1);
  if (subcommand_required_) {
    std::string names;
    for (const auto& c : subcommands_) names += (names.empty() ? "" : ", ") + c->name_;
    throw UsageError("'" + path_ + "' needs a command: " + names);
  }
  return nullptr;
}

int Command::main(int argc, const char* const* argv) {
  // One line that points to the --help of the command `where` concerns; exit code 2.
  const auto usage_error = [this](const UsageError& e, const Command& where) {
    std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", name_.c_str(), e.what(), where.path_.c_str());
    return 2;
  };
  const std::vector<std::string> args(argv + 1, argv + argc);
  const Command* help_for = nullptr;
  try {
    help_for = parse(args, 0);
  } catch (const UsageError& e) {
    const Command* where = this;  // the command being parsed when the error came: the last one named
    while (where->chosen_ != nullptr) where = where->chosen_;
    return usage_error(e, *where);
  }
  if (version_asked_) {
    std::printf("%s\n", version_.c_str());
    return 0;
  }
  if (help_for != nullptr) {
    std::fputs(help_for->help().c_str(), stdout);
    return 0;
  }
  for (const Command* c = this; c != nullptr; c = c->chosen_) {
    if (!c->callback_) continue;
    try {
      c->callback_();
    } catch (const UsageError& e) {  // an option value the command checked itself, before its work
      return usage_error(e, *c);
    }
  }
  return 0;
}

}  // namespace pasa::cli
