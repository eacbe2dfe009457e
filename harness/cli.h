// cli.h: a small declarative command-line parser with strict, clear errors.
//
//   ArgParser p("02_online_softmax", "row-wise softmax ...");
//   long long rows = 16384;  p.add_int("--rows", &rows, 1, 1 << 30, "rows of x");
//   bool check = false;      p.add_flag("--check", &check, "compare with ...");
//   p.conflicts("--csv", "--json");
//   if (!p.parse(argc, argv)) return 0;   // --help printed
//
// Accepts "--name value" and "--name=value". Every mistake throws fa::UsageError naming the
// flag: an unknown flag, a flag given twice, two flags declared to conflict, a missing value, a
// malformed number, a number out of its range (also one too large to represent), a string not
// among its choices, or a flag this program declared refused (with its reason).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace fa {

class ArgParser {
 public:
  ArgParser(std::string program, std::string description);
  void add_flag(const std::string& name, bool* out, const std::string& help);
  void add_int(const std::string& name, long long* out, long long min, long long max, const std::string& help);
  void add_double(const std::string& name, double* out, double min, double max, const std::string& help);
  void add_string(const std::string& name, std::string* out, const std::string& help,
                  std::vector<std::string> choices = {});
  // Giving both `a` and `b` (in either order) is an error: "a conflicts with b (why)".
  void conflicts(const std::string& a, const std::string& b, const std::string& why = "");
  // A flag this program knows but does not accept (e.g. --bwd for a forward-only step): not in
  // --help; giving it is an error "name: why".
  void refuse(const std::string& name, const std::string& why);
  // Returns false if --help was given (help already printed to stdout).
  bool parse(int argc, const char* const* argv);
  bool given(const std::string& name) const;  // was the flag on the command line?
  // The flags declared so far (refused ones aside), in order, from the `first`-th declared on
  // (flag_count() taken before a group of add_* calls names that group).
  std::size_t flag_count() const { return opts_.size(); }
  std::vector<std::string> flag_names(std::size_t first = 0) const;
  std::string help() const;

 private:
  enum class Kind { Flag, Int, Double, String, Refused };
  struct Opt {
    std::string name, help;
    Kind kind;
    void* out;
    long long imin = 0, imax = 0;
    double dmin = 0, dmax = 0;
    std::vector<std::string> choices;
    bool given = false;
  };
  struct Conflict {
    std::string a, b, why;
  };
  Opt* find(const std::string& name);
  const Opt* find(const std::string& name) const;
  void add(Opt o);
  void set_value(Opt& o, const std::string& value);
  std::string program_, description_;
  std::vector<Opt> opts_;
  std::vector<Conflict> conflicts_;
};

}  // namespace fa
