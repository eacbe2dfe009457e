#include "runner.h"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "check.h"
#include "cli.h"
#include "device_check.h"
#include "launch.h"
#include "lowp.h"
#include "random.h"

namespace fa {

std::string Problem::describe() const {
  char buf[160];
  switch (family) {
    case Family::Softmax:
      std::snprintf(buf, sizeof buf, "%lldx%lld", rows, cols);
      break;
    case Family::Matmul: {
      const char* op = layout == MatmulLayout::NT ? "NT" : layout == MatmulLayout::NN ? "NN" : "TN";
      if (batch > 1)
        std::snprintf(buf, sizeof buf, "%lldx%lldx%lld %s x%lld", M, N, K, op, batch);
      else
        std::snprintf(buf, sizeof buf, "%lldx%lldx%lld %s", M, N, K, op);
      break;
    }
    case Family::Attention: {
      const char* dt = dtype_name(attn.dtype);
      char heads[48];  // "H32", or "H32 KV8" with grouped-query attention
      if (kv_heads_of(attn) == attn.heads)
        std::snprintf(heads, sizeof heads, "H%d", attn.heads);
      else
        std::snprintf(heads, sizeof heads, "H%d KV%d", attn.heads, kv_heads_of(attn));
      // "cache": a KV cache of capacity Sk with per-sequence lengths (step 22); "cache p16": in pages of 16 keys
      char paged[24] = "";
      if (attn.page_size > 0) std::snprintf(paged, sizeof paged, " p%d", attn.page_size);
      char mask[48];
      std::snprintf(mask, sizeof mask, "%s%s%s", attn.kv_cache ? " cache" : "", paged, attn.causal ? " causal" : "");
      if (attn.seq_q == attn.seq_k)
        std::snprintf(buf, sizeof buf, "B%d %s S%d D%d%s %s%s", attn.batch, heads, attn.seq_q, attn.head_dim, mask,
                      dt, backward ? " fwd+bwd" : "");
      else
        std::snprintf(buf, sizeof buf, "B%d %s Sq%d Sk%d D%d%s %s%s", attn.batch, heads, attn.seq_q, attn.seq_k,
                      attn.head_dim, mask, dt, backward ? " fwd+bwd" : "");
      break;
    }
  }
  return buf;
}

const FamilyOps& family_ops(Family f) {
  switch (f) {
    case Family::Softmax:
      return kSoftmaxFamily;
    case Family::Matmul:
      return kMatmulFamily;
    case Family::Attention:
      return kAttentionFamily;
  }
  throw Error("unknown op family");
}

Problem default_problem(const StepInfo& step) {
  if (step.default_problem) return step.default_problem();
  Problem p = family_ops(step.family).default_problem();
  if (step.family == Family::Attention) p.attn.dtype = step.attn_rule.dtypes.front();
  return p;
}

// The previous step, if it can run this problem (it may not: a shape or memory limit), or the
// problem its family derives for it (prev_problem); else null, with a note saying why the
// comparison is skipped.
static const StepInfo* usable_prev(const StepInfo* prev, const Problem& p, const DeviceInfo& dev, const RunOptions& o) {
  if (!prev) return nullptr;
  const FamilyOps& fam = family_ops(prev->family);
  const Problem q = fam.prev_problem ? fam.prev_problem(*prev, p) : p;
  std::string why = wrong_device(*prev, dev.id);
  if (why.empty()) why = step_supports(*prev, q);
  if (why.empty()) try {
      fam.validate(*prev, q, &dev);
    } catch (const UsageError& e) {
      why = e.what();
    }
  if (why.empty()) return prev;
  say(o, std::string("  note: no comparison with ") + prev->name + " on " + q.describe() + ": " + why);
  return nullptr;
}

void set_rate(ResultRow& r, double ms, double amount, double per_unit, const char* unit, const char* peak_name,
              double peak) {
  r.time_ms = ms;
  r.rate = amount / (ms * 1e-3) * per_unit;
  r.unit = unit;
  r.peak_name = peak_name;
  r.peak_value = peak;
  r.pct_peak = 100.0 * r.rate / peak;
}

void profile_one_launch(const std::function<void(cudaStream_t)>& launch) {
  launch(nullptr);  // warm-up: module load, first touch of the buffers
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  FA_CUDA_CHECK(cudaProfilerStart());
  launch(nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  FA_CUDA_CHECK(cudaProfilerStop());
}

void say(const RunOptions& o, const std::string& line) {
  std::fprintf(o.quiet ? stderr : stdout, "%s\n", line.c_str());
  std::fflush(o.quiet ? stderr : stdout);
}

// ---- output ---------------------------------------------------------------------------------
// Characters, not bytes, for column widths (step ideas and units may hold "·" or "ᵀ").
static std::size_t utf8_length(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

static std::string num(double v, const char* fmt) {
  if (v < 0 || !std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string format_table(const std::vector<ResultRow>& rows) {
  // One line of cells per row, the header first; every column but the last (idea) padded to
  // its widest cell: names left-aligned, numbers right-aligned.
  std::vector<std::vector<std::string>> cells{
      {"step", "problem", "time (ms)", "rate", "% peak", "x prev", "x base", "err prev", "check", "idea"}};
  for (const auto& r : rows)
    cells.push_back({r.step, r.problem, num(r.time_ms, "%.4f"),
                     r.rate < 0 ? "-" : num(r.rate, r.rate < 100 ? "%.2f " : "%.0f ") + r.unit,
                     r.pct_peak < 0 ? "-" : num(r.pct_peak, "%.1f%% ") + r.peak_name, num(r.speedup_vs_prev, "%.2fx"),
                     num(r.vs_baseline, "%.2fx"), num(r.err_vs_prev, "%.2g"), r.check.empty() ? "-" : r.check, r.idea});
  const std::size_t ncol = cells[0].size();
  std::vector<std::size_t> width(ncol, 0);
  for (const auto& line : cells)
    for (std::size_t c = 0; c < ncol; ++c) width[c] = std::max(width[c], utf8_length(line[c]));
  std::string out = "\n";
  for (const auto& line : cells) {
    std::string text;
    for (std::size_t c = 0; c < ncol; ++c) {
      const std::string pad(width[c] - utf8_length(line[c]), ' ');
      if (c + 1 == ncol)
        text += line[c];
      else
        text += (c < 2 ? line[c] + pad : pad + line[c]) + "  ";
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  }
  return out;
}

void print_rows(const std::vector<ResultRow>& rows, const std::string& format, const DeviceInfo& dev) {
  if (format == "csv") {
    std::printf(
        "step,idea,problem,time_ms,rate,unit,pct_peak,peak,peak_value,prev_step,prev_time_ms,speedup_vs_prev,"
        "err_vs_prev,check,baseline,baseline_time_ms,vs_baseline,device\n");
    for (const auto& r : rows)
      std::printf("%s,\"%s\",%s,%.6g,%.6g,%s,%.4g,%s,%.6g,%s,%.6g,%.4g,%.3g,%s,%s,%.6g,%.4g,%s\n", r.step.c_str(),
                  r.idea.c_str(), r.problem.c_str(), r.time_ms, r.rate, r.unit.c_str(), r.pct_peak, r.peak_name.c_str(),
                  r.peak_value, r.prev_step.c_str(), r.prev_time_ms, r.speedup_vs_prev, r.err_vs_prev, r.check.c_str(),
                  r.baseline.c_str(), r.baseline_time_ms, r.vs_baseline, dev.name.c_str());
    return;
  }
  if (format == "json") {
    std::printf("{\"device\": \"%s\", \"copy_gbs\": %.6g, \"rows\": [\n", dev.name.c_str(), dev.copy_gbs);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::printf(
          "  {\"step\": \"%s\", \"idea\": \"%s\", \"problem\": \"%s\", \"time_ms\": %.6g, \"rate\": %.6g, "
          "\"unit\": \"%s\", \"pct_peak\": %.4g, \"peak\": \"%s\", \"peak_value\": %.6g, \"prev_step\": \"%s\", "
          "\"prev_time_ms\": %.6g, \"speedup_vs_prev\": %.4g, \"err_vs_prev\": %.3g, \"check\": \"%s\", "
          "\"baseline\": \"%s\", \"baseline_time_ms\": %.6g, \"vs_baseline\": %.4g}%s\n",
          r.step.c_str(), r.idea.c_str(), r.problem.c_str(), r.time_ms, r.rate, r.unit.c_str(), r.pct_peak,
          r.peak_name.c_str(), r.peak_value, r.prev_step.c_str(), r.prev_time_ms, r.speedup_vs_prev, r.err_vs_prev,
          r.check.c_str(), r.baseline.c_str(), r.baseline_time_ms, r.vs_baseline, i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
    return;
  }
  std::fputs(format_table(rows).c_str(), stdout);
  std::printf(
      "(%s. %% peak: of the measured device-to-device copy for GB/s rows, of the FP32 peak for fp32 TFLOP/s rows, "
      "of the dense fp16/bf16 tensor-core peak for f16/bf16 rows. "
      "x prev: the previous step's time / this step's, same problem, interleaved in one run. x base: the library "
      "baseline's time / this step's.)\n",
      dev.name.c_str());
}

// ---- shared flags ---------------------------------------------------------------------------
struct CommonFlags {
  bool check = false, bench = false, sweep = false, csv = false, json = false, device_info = false, profile = false;
  long long seed = -1, reps = 20, warmup = 3, device = 0;
};

static void add_common_flags(ArgParser& p, CommonFlags& f) {
  p.add_flag("--check", &f.check, "compare with the previous step and the fp64 reference");
  p.add_flag("--bench", &f.bench, "time this step (and the previous one, same inputs)");
  p.add_flag("--sweep", &f.sweep, "time the family's benchmark shapes (docs/conventions.md, \"Measurement\")");
  p.add_flag("--csv", &f.csv, "results as CSV on stdout");
  p.add_flag("--json", &f.json, "results as JSON on stdout");
  p.add_flag("--device-info", &f.device_info, "print the device and its measured ceilings, then exit");
  p.add_flag("--profile", &f.profile, "one warm-up launch, then one launch for ncu --profile-from-start off");
  p.add_int("--seed", &f.seed, 0, (1ll << 62), "random seed for the inputs (default: fresh each run)");
  p.add_int("--reps", &f.reps, 20, 100000, "timed repetitions (median reported; at least 20)");
  p.add_int("--warmup", &f.warmup, 0, 100000, "untimed warm-up launches");
  p.add_int("--device", &f.device, 0, 1024, "CUDA device index");
  p.conflicts("--csv", "--json", "the output formats are exclusive");
  for (const char* mode : {"--check", "--bench", "--sweep"}) p.conflicts("--profile", mode, "--profile runs alone");
}

static RunOptions run_options(const CommonFlags& f) {
  RunOptions o;
  o.check = f.check;
  o.bench = f.bench;
  o.profile = f.profile;
  o.seed = f.seed >= 0 ? std::uint64_t(f.seed) : fresh_seed();
  o.timing.reps = int(f.reps);
  o.timing.warmup = int(f.warmup);
  o.quiet = f.csv || f.json;
  return o;
}

static DeviceInfo open_device(int id, const RunOptions& o, bool measure_copy) {
  std::string why;
  if (!cuda_device_available(&why)) throw CudaError("no CUDA device: " + why);
  int n = 0;
  FA_CUDA_CHECK(cudaGetDeviceCount(&n));
  if (id >= n) throw UsageError("--device " + std::to_string(id) + ": only " + std::to_string(n) + " device(s)");
  DeviceInfo dev = query_device(id, measure_copy);
  say(o, describe(dev));
  return dev;
}

// Runs `body`, mapping exceptions to the exit codes of check.h with a one-line message.
template <class F>
static int guarded(F&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    const bool no_device = std::string(e.what()).rfind("no CUDA device", 0) == 0;
    return no_device ? kExitNoDevice : kExitCheckFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitCheckFailed;
  }
}

static std::string none_of_the_sweep(const std::string& step, std::size_t asked,
                              const std::vector<std::pair<Problem, std::string>>& refused) {
  std::vector<std::string> reasons;  // distinct, in order
  for (const auto& r : refused)
    if (std::find(reasons.begin(), reasons.end(), r.second) == reasons.end()) reasons.push_back(r.second);
  std::string out = step + " supports none of the --sweep problems (" + std::to_string(asked) + "): ";
  for (std::size_t i = 0; i < reasons.size(); ++i) {
    std::size_t n = 0;
    const Problem* first = nullptr;
    for (const auto& r : refused)
      if (r.second == reasons[i]) n += 1, first = first ? first : &r.first;
    out += (i ? "; " : "") + reasons[i] + " (" + (reasons.size() == 1 ? "every one" : std::to_string(n) + " of them") +
           ", e.g. " + first->describe() + ")";
  }
  return out;
}

int step_main(int argc, char** argv, const StepInfo& step, const StepInfo* prev) {
  return guarded([&] {
    const FamilyOps& fam = family_ops(step.family);
    ArgParser parser(step.name,
                     std::string(step.idea) + "\nWith no mode flag: --check then --bench on the default problem.");
    CommonFlags f;
    add_common_flags(parser, f);
    Problem p = default_problem(step);
    const std::size_t first_shape_flag = parser.flag_count();
    fam.add_shape_flags(parser, step, p);
    // --sweep runs the family's shapes: a shape flag beside it would be silently ignored.
    std::vector<std::string> shape_flags = parser.flag_names(first_shape_flag), kept;
    for (const std::string& name : shape_flags)
      if (std::find(fam.sweep_flags.begin(), fam.sweep_flags.end(), name) != fam.sweep_flags.end())
        kept.push_back(name);
    std::string sweep_note = std::string("--sweep runs the ") + fam.name + " benchmark shapes";
    for (std::size_t i = 0; i < kept.size(); ++i)
      sweep_note += (i ? ", " : "; of the shape flags it takes only ") + kept[i];
    for (const std::string& name : shape_flags)
      if (std::find(kept.begin(), kept.end(), name) == kept.end()) parser.conflicts("--sweep", name, sweep_note);
    if (!parser.parse(argc, const_cast<const char* const*>(argv))) return int(kExitOk);
    if (!f.check && !f.bench && !f.sweep && !f.device_info && !f.profile) f.check = f.bench = true;
    RunOptions o = run_options(f);
    if (fam.resolve) fam.resolve(parser, p, o);  // reads --input: before any device work
    std::vector<Problem> problems;
    std::vector<std::pair<Problem, std::string>> refused;  // --sweep: the shapes the step does not run, and why
    const std::vector<Problem> asked = f.sweep ? fam.sweep(step) : std::vector<Problem>{p};
    for (const Problem& q : asked) {
      fam.validate(step, q, nullptr);  // sizes first: no device needed
      const std::string why = step_supports(step, q);
      if (why.empty())
        problems.push_back(q);
      else if (!f.sweep)
        throw UsageError(std::string(step.name) + " does not support " + q.describe() + ": " + why);
      else
        refused.emplace_back(q, why);
    }
    // Every shape refused: the error first, each distinct reason once (not a skip line per shape).
    if (problems.empty()) throw UsageError(none_of_the_sweep(step.name, asked.size(), refused));
    for (const auto& [q, why] : refused) std::fprintf(stderr, "skip %s: %s\n", q.describe().c_str(), why.c_str());

    // A step built for one architecture (needs_cc) on another GPU: say so plainly, exit 4.
    if (const std::string why = wrong_device(step, int(f.device)); !why.empty()) {
      std::fprintf(stderr, "error: %s\n", why.c_str());
      return int(kExitWrongDevice);
    }
    const DeviceInfo dev = open_device(int(f.device), o, f.bench || f.sweep || f.device_info);
    if (f.device_info) return int(kExitOk);
    if (o.inputs.empty())
      say(o, "seed " + std::to_string(o.seed) + (o.randn ? ", inputs randn" : "") + " (replay with --seed " +
                 std::to_string(o.seed) + (o.randn ? " --inputs randn" : "") + ")");
    else
      say(o, "inputs from --input " + o.input_path);
    if (f.sweep) o.bench = true;

    std::vector<ResultRow> rows;
    bool all_ok = true;
    for (const auto& q : problems) {
      try {
        fam.validate(step, q, &dev);  // with the device: memory
      } catch (const UsageError& e) {
        if (!f.sweep) throw;
        say(o, std::string("skip ") + q.describe() + ": " + e.what());
        continue;
      }
      for (ResultRow& r : fam.run(step, usable_prev(prev, q, dev, o), q, o, dev)) {
        all_ok &= r.check != "FAIL";
        rows.push_back(std::move(r));
      }
    }
    if (o.profile) return int(kExitOk);
    if (o.bench || o.quiet) print_rows(rows, f.csv ? "csv" : f.json ? "json" : "table", dev);
    return int(all_ok ? kExitOk : kExitCheckFailed);
  });
}

std::vector<bool> select_steps(const std::string& list, const std::vector<const StepInfo*>& steps) {
  std::string built;
  for (const StepInfo* s : steps) built += (built.empty() ? "" : ", ") + std::string(s->name);
  std::vector<bool> chosen(steps.size(), false);
  std::size_t begin = 0;
  while (begin <= list.size()) {
    const std::size_t end = std::min(list.find(',', begin), list.size());
    const std::string item = list.substr(begin, end - begin);
    begin = end + 1;
    if (item.empty()) throw UsageError("--steps '" + list + "': an empty item (steps are separated by one comma)");
    const bool number = item.size() <= 3 && item.find_first_not_of("0123456789") == std::string::npos;
    bool found = false;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const std::string name = steps[i]->name;
      const bool match = number ? std::atoi(item.c_str()) == std::atoi(name.substr(0, 2).c_str()) : item == name;
      if (match && chosen[i]) throw UsageError("--steps '" + list + "': " + name + " is named twice");
      if (match) chosen[i] = found = true;
    }
    if (!found) throw UsageError("--steps: no built step '" + item + "' (built: " + built + ")");
  }
  return chosen;
}

int run_all_main(int argc, char** argv, const std::vector<StepAndPrev>& list) {
  return guarded([&] {
    ArgParser parser("run_all", "Runs every built step on its default problem (check + bench) and prints one table.");
    CommonFlags f;
    parser.add_flag("--csv", &f.csv, "results as CSV on stdout");
    parser.add_flag("--json", &f.json, "results as JSON on stdout");
    parser.add_int("--seed", &f.seed, 0, (1ll << 62), "random seed for the inputs (default: fresh each run)");
    parser.add_int("--reps", &f.reps, 20, 100000, "timed repetitions (median reported; at least 20)");
    parser.add_int("--device", &f.device, 0, 1024, "CUDA device index");
    std::string only;
    parser.add_string("--steps", &only, "comma-separated steps to run, by number or name, e.g. 01,02 (default: all)");
    parser.conflicts("--csv", "--json", "the output formats are exclusive");
    if (!parser.parse(argc, const_cast<const char* const*>(argv))) return int(kExitOk);
    RunOptions o = run_options(f);
    o.check = o.bench = true;
    std::vector<const StepInfo*> steps;
    for (const StepAndPrev& e : list) steps.push_back(e.step);
    const std::vector<bool> chosen =
        parser.given("--steps") ? select_steps(only, steps) : std::vector<bool>(steps.size(), true);

    const DeviceInfo dev = open_device(int(f.device), o, /*measure_copy=*/true);
    say(o, "seed " + std::to_string(o.seed));
    std::vector<ResultRow> rows;
    bool all_ok = true;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const StepInfo* s = steps[i];
      if (!chosen[i]) continue;
      if (const std::string why = wrong_device(*s, dev.id); !why.empty()) {  // needs_cc: another GPU
        say(o, std::string("== skip ") + s->name + ": " + why);
        continue;
      }
      const FamilyOps& fam = family_ops(s->family);
      const Problem p = default_problem(*s);
      fam.validate(*s, p, &dev);
      say(o, std::string("== ") + s->name + " on " + p.describe());
      for (ResultRow& r : fam.run(*s, usable_prev(list[i].prev, p, dev, o), p, o, dev)) {
        all_ok &= r.check != "FAIL";
        rows.push_back(std::move(r));
      }
    }
    print_rows(rows, f.csv ? "csv" : f.json ? "json" : "table", dev);
    return int(all_ok ? kExitOk : kExitCheckFailed);
  });
}

}  // namespace fa
