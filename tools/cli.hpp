// The command line of dcomm's tools (dcomm-bench, dcomm-sim, dcomm-topo): flags declared once,
// each with the line --help prints for it, and one parser.
//
//   dcomm_cli::Cli cli("dcomm-topo", "[-j [file.json]]", "How this host's GPUs and NICs connect.");
//   cli.flag("-j", "", "JSON instead of the matrix", [&](const std::string&) { json = true; return ""; });
//   cli.parse(argc, argv);
//
// -h and --help print the help (usage, what the tool does, every flag) to stdout and exit 0.
// A flag the tool does not have, a flag without its value, or a value its setter refuses
// prints what is wrong and "see <tool> --help" to stderr and exits 2.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace dcomm_cli {

class Cli {
 public:
  // Takes a flag's value (or a word that is not a flag); returns "" when it is accepted, else
  // why not.
  using Take = std::function<std::string(const std::string& value)>;

  Cli(std::string program, std::string synopsis, std::string about)
      : program_(std::move(program)), synopsis_(std::move(synopsis)), about_(std::move(about)) {}

  // A flag with a value (`arg` names it in the help), or, when `arg` is empty, a switch (its
  // setter gets ""). An optional value (`arg` in brackets) is taken only when the next word
  // is not a flag.
  Cli& flag(std::string name, std::string arg, std::string help, Take take) {
    flags_.push_back({std::move(name), std::move(arg), std::move(help), std::move(take)});
    return *this;
  }
  // What the words that are not flags mean (the help's "arguments" line) and who takes them;
  // without this, such a word is an error.
  Cli& words(std::string help, Take take) {
    words_help_ = std::move(help);
    words_ = std::move(take);
    return *this;
  }
  // Free text printed after the flags (examples, environment variables).
  Cli& epilog(std::string text) {
    epilog_ = std::move(text);
    return *this;
  }

  void parse(int argc, char** argv, int first = 1) const {
    for (int i = first; i < argc; ++i) {
      const std::string word = argv[i];
      if (word == "-h" || word == "--help") {
        std::fputs(help().c_str(), stdout);
        std::exit(0);
      }
      const Flag* f = find(word);
      if (!f) {
        if (word.size() > 1 && word[0] == '-') fail("unknown flag " + word);
        if (!words_) fail("unexpected argument " + word);
        if (std::string why = words_(word); !why.empty()) fail(why);
        continue;
      }
      std::string value;
      if (!f->arg.empty()) {
        const bool optional = f->arg.front() == '[';  // taken only when the next word is no flag
        if (i + 1 < argc && (!optional || argv[i + 1][0] != '-')) value = argv[++i];
        else if (!optional) fail("missing value after " + word + " (" + f->arg + ")");
      }
      if (std::string why = f->take(value); !why.empty()) fail(word + ": " + why);
    }
  }

  [[noreturn]] void fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\nusage: %s %s\nsee %s --help\n", program_.c_str(), why.c_str(), program_.c_str(),
                 synopsis_.c_str(), program_.c_str());
    std::exit(2);
  }

  std::string help() const {
    std::string out = "usage: " + program_ + " " + synopsis_ + "\n\n" + about_ + "\n";
    if (!words_help_.empty()) out += "\narguments:\n  " + words_help_ + "\n";
    out += "\nflags:\n";
    size_t width = 10;
    for (const Flag& f : flags_) width = std::max(width, label(f).size());
    for (const Flag& f : flags_) {
      std::string text = f.help;  // a line break in it continues under the first line
      for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1))
        text.insert(at + 1, std::string(width + 4, ' '));
      out += "  " + label(f) + std::string(width - label(f).size() + 2, ' ') + text + "\n";
    }
    out += "  " + std::string("-h, --help") + std::string(width - 10 + 2, ' ') + "this help\n";
    if (!epilog_.empty()) out += "\n" + epilog_ + "\n";
    return out;
  }

 private:
  struct Flag {
    std::string name, arg, help;
    Take take;
  };
  static std::string label(const Flag& f) { return f.arg.empty() ? f.name : f.name + " " + f.arg; }
  const Flag* find(const std::string& name) const {
    for (const Flag& f : flags_)
      if (f.name == name) return &f;
    return nullptr;
  }

  std::string program_, synopsis_, about_, words_help_, epilog_;
  std::vector<Flag> flags_;
  Take words_;
};

}  // namespace dcomm_cli
