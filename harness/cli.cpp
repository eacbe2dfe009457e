#include "cli.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "check.h"

namespace fa {

namespace {
std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}
}  // namespace

ArgParser::ArgParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void ArgParser::add(Opt o) {
  if (o.name.rfind("--", 0) != 0) throw Error("ArgParser: flag " + o.name + " does not start with --");
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
void ArgParser::refuse(const std::string& n, const std::string& why) { add({n, why, Kind::Refused, nullptr}); }

void ArgParser::conflicts(const std::string& a, const std::string& b, const std::string& why) {
  for (const std::string* n : {&a, &b})
    if (!find(*n)) throw Error("ArgParser: conflict with undeclared flag " + *n);
  if (a == b) throw Error("ArgParser: flag " + a + " cannot conflict with itself");
  conflicts_.push_back({a, b, why});
}

ArgParser::Opt* ArgParser::find(const std::string& name) {
  for (auto& o : opts_)
    if (o.name == name) return &o;
  return nullptr;
}
const ArgParser::Opt* ArgParser::find(const std::string& name) const {
  return const_cast<ArgParser*>(this)->find(name);
}
bool ArgParser::given(const std::string& name) const {
  const Opt* o = find(name);
  return o && o->given;
}
std::vector<std::string> ArgParser::flag_names(std::size_t first) const {
  std::vector<std::string> out;
  for (std::size_t i = first; i < opts_.size(); ++i)
    if (opts_[i].kind != Kind::Refused) out.push_back(opts_[i].name);
  return out;
}

void ArgParser::set_value(Opt& o, const std::string& value) {
  const std::string& arg = o.name;
  char* end = nullptr;
  errno = 0;
  if (o.kind == Kind::Int) {
    const std::string range = " is out of range [" + std::to_string(o.imin) + ", " + std::to_string(o.imax) + "]";
    const long long x = std::strtoll(value.c_str(), &end, 10);
    if (end == value.c_str() || *end != '\0') throw UsageError(arg + ": '" + value + "' is not an integer");
    if (errno == ERANGE || x < o.imin || x > o.imax) throw UsageError(arg + ": " + value + range);
    *static_cast<long long*>(o.out) = x;
  } else if (o.kind == Kind::Double) {
    const std::string range = " is out of range [" + num(o.dmin) + ", " + num(o.dmax) + "]";
    const double x = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || std::isnan(x))
      throw UsageError(arg + ": '" + value + "' is not a finite number");
    // ERANGE: too large for a double (or too small to be told from 0): out of any range.
    if (errno == ERANGE || !std::isfinite(x) || x < o.dmin || x > o.dmax) throw UsageError(arg + ": " + value + range);
    *static_cast<double*>(o.out) = x;
  } else {
    if (!o.choices.empty() && std::find(o.choices.begin(), o.choices.end(), value) == o.choices.end()) {
      std::string all;
      for (const auto& c : o.choices) all += (all.empty() ? "" : ", ") + c;
      throw UsageError(arg + ": '" + value + "' is not one of: " + all);
    }
    *static_cast<std::string*>(o.out) = value;
  }
}

bool ArgParser::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (arg.rfind("--help=", 0) == 0) throw UsageError("--help takes no value");
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
    if (o->kind == Kind::Refused) throw UsageError(arg + ": " + o->help);
    if (o->given) throw UsageError(arg + " given twice");
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
    set_value(*o, value);
  }
  for (const Conflict& c : conflicts_)
    if (given(c.a) && given(c.b))
      throw UsageError(c.a + " conflicts with " + c.b + (c.why.empty() ? "" : " (" + c.why + ")"));
  return true;
}

std::string ArgParser::help() const {
  auto left = [](const Opt& o) {
    const char* meta = o.kind == Kind::Int ? " N" : o.kind == Kind::Double ? " X" : o.kind == Kind::String ? " S" : "";
    return "  " + o.name + meta;
  };
  std::size_t width = std::string("  --help").size();
  for (const auto& o : opts_)
    if (o.kind != Kind::Refused) width = std::max(width, left(o).size());
  auto line = [&](std::string l, const std::string& text) {
    l.resize(width + 2, ' ');
    return l + text + "\n";
  };
  std::string s = "usage: " + program_ + " [flags]\n" + description_ + "\n\nflags:\n";
  for (const auto& o : opts_) {
    if (o.kind == Kind::Refused) continue;
    std::string text = o.help;
    if (!o.choices.empty()) {
      text += " (";
      for (std::size_t i = 0; i < o.choices.size(); ++i) text += (i ? "|" : "") + o.choices[i];
      text += ")";
    }
    s += line(left(o), text);
  }
  s += line("  --help", "this text");
  // Conflicts, grouped by their first flag: "  --sweep  not with --batch, --heads, ..."
  std::vector<std::string> firsts;
  for (const auto& c : conflicts_)
    if (std::find(firsts.begin(), firsts.end(), c.a) == firsts.end()) firsts.push_back(c.a);
  if (!firsts.empty()) s += "\nflags that conflict:\n";
  for (const auto& a : firsts) {
    std::string others;
    for (const auto& c : conflicts_)
      if (c.a == a) others += (others.empty() ? "" : ", ") + c.b;
    s += line("  " + a, "not with " + others);
  }
  return s;
}

}  // namespace fa
