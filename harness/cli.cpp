#include "cli.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "check.h"

namespace fa {

ArgParser::ArgParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void ArgParser::add(Opt o) {
  if (find(o.name)) throw Error("ArgParser: flag " + o.name + " declared twice");
  opts_.push_back(std::move(o));
}
void ArgParser::add_flag(const std::string& n, bool* out, const std::string& h) { add({n, h, Kind::Flag, out}); }
void ArgParser::add_int(const std::string& n, long long* out, long long lo, long long hi, const std::string& h) {
  Opt o{n, h, Kind::Int, out};
  o.imin = lo;
  o.imax = hi;
  add(o);
}
void ArgParser::add_double(const std::string& n, double* out, double lo, double hi, const std::string& h) {
  Opt o{n, h, Kind::Double, out};
  o.dmin = lo;
  o.dmax = hi;
  add(o);
}
void ArgParser::add_string(const std::string& n, std::string* out, const std::string& h, std::vector<std::string> c) {
  Opt o{n, h, Kind::String, out};
  o.choices = std::move(c);
  add(o);
}

ArgParser::Opt* ArgParser::find(const std::string& name) {
  for (auto& o : opts_)
    if (o.name == name) return &o;
  return nullptr;
}
bool ArgParser::given(const std::string& name) const {
  for (const auto& o : opts_)
    if (o.name == name) return o.given;
  return false;
}

bool ArgParser::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (arg.rfind("--", 0) != 0)
      throw UsageError("unexpected argument '" + arg + "' (flags start with --; see --help)");
    const auto eq = arg.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    Opt* o = find(arg);
    if (!o) throw UsageError("unknown flag '" + arg + "' (see --help)");
    o->given = true;
    if (o->kind == Kind::Flag) {
      if (inline_value) throw UsageError(arg + " takes no value");
      *static_cast<bool*>(o->out) = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      value = argv[++i];
    }
    if (value.empty()) throw UsageError(arg + " needs a value");
    char* end = nullptr;
    errno = 0;
    if (o->kind == Kind::Int) {
      const long long x = std::strtoll(value.c_str(), &end, 10);
      if (*end != '\0' || errno == ERANGE) throw UsageError(arg + ": '" + value + "' is not an integer");
      if (x < o->imin || x > o->imax)
        throw UsageError(arg + ": " + value + " is out of range [" + std::to_string(o->imin) + ", " +
                         std::to_string(o->imax) + "]");
      *static_cast<long long*>(o->out) = x;
    } else if (o->kind == Kind::Double) {
      const double x = std::strtod(value.c_str(), &end);
      if (*end != '\0' || errno == ERANGE || !std::isfinite(x))
        throw UsageError(arg + ": '" + value + "' is not a finite number");
      if (x < o->dmin || x > o->dmax)
        throw UsageError(arg + ": " + value + " is out of range [" + std::to_string(o->dmin) + ", " +
                         std::to_string(o->dmax) + "]");
      *static_cast<double*>(o->out) = x;
    } else {
      if (!o->choices.empty()) {
        bool ok = false;
        std::string all;
        for (const auto& c : o->choices) {
          ok |= c == value;
          all += (all.empty() ? "" : ", ") + c;
        }
        if (!ok) throw UsageError(arg + ": '" + value + "' is not one of: " + all);
      }
      *static_cast<std::string*>(o->out) = value;
    }
  }
  return true;
}

std::string ArgParser::help() const {
  std::string s = "usage: " + program_ + " [flags]\n" + description_ + "\n\nflags:\n";
  for (const auto& o : opts_) {
    std::string left = "  " + o.name;
    if (o.kind == Kind::Int) left += " N";
    if (o.kind == Kind::Double) left += " X";
    if (o.kind == Kind::String) left += " S";
    if (left.size() < 22) left.resize(22, ' ');
    s += left + " " + o.help;
    if (!o.choices.empty()) {
      s += " (";
      for (std::size_t i = 0; i < o.choices.size(); ++i) s += (i ? "|" : "") + o.choices[i];
      s += ")";
    }
    s += "\n";
  }
  return s + "  --help               this text\n";
}

}  // namespace fa
