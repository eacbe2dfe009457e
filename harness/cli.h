// cli.h: a small declarative command-line parser with strict, clear errors.
//
//   ArgParser p("02_online_softmax", "row-wise softmax ...");
//   long long rows = 16384;  p.add_int("--rows", &rows, 1, 1 << 30, "rows of x");
//   bool check = false;      p.add_flag("--check", &check, "compare with ...");
//   if (!p.parse(argc, argv)) return 0;   // --help printed
//
// Accepts "--name value" and "--name=value". Unknown flags, missing values, malformed numbers
// and out-of-range values throw fa::UsageError naming the flag and the allowed range.
#pragma once
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
  // Returns false if --help was given (help already printed to stdout).
  bool parse(int argc, const char* const* argv);
  bool given(const std::string& name) const;  // was the flag on the command line?
  std::string help() const;

 private:
  enum class Kind { Flag, Int, Double, String };
  struct Opt {
    std::string name, help;
    Kind kind;
    void* out;
    long long imin = 0, imax = 0;
    double dmin = 0, dmax = 0;
    std::vector<std::string> choices;
    bool given = false;
  };
  Opt* find(const std::string& name);
  void add(Opt o);
  std::string program_, description_;
  std::vector<Opt> opts_;
};

}  // namespace fa
