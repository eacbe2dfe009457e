// golden.h: the committed golden cases (tests/data/manifest.txt, written by make_reference.py).
#pragma once
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace golden {

struct Case {
  std::string op, name, dir;
  std::map<std::string, std::string> params;
  const std::string& param(const std::string& key) const {
    const auto it = params.find(key);
    if (it == params.end()) throw std::runtime_error("golden case " + name + " has no parameter " + key);
    return it->second;
  }
  long long integer(const std::string& key) const { return std::stoll(param(key)); }
  double number(const std::string& key) const { return std::stod(param(key)); }
  std::string path(const std::string& tensor) const { return dir + "/" + name + "." + tensor + ".npy"; }
};

// Every case of the manifest, or only those of one op ("softmax", "matmul", "attention").
inline std::vector<Case> cases(const std::string& dir, const std::string& op = "") {
  std::ifstream in(dir + "/manifest.txt");
  if (!in) throw std::runtime_error("cannot open " + dir + "/manifest.txt (run reference/make_reference.py)");
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Case c;
    c.dir = dir;
    ss >> c.op >> c.name;
    for (std::string kv; ss >> kv;) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) throw std::runtime_error("bad manifest entry '" + kv + "' in: " + line);
      c.params[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (op.empty() || c.op == op) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace golden
