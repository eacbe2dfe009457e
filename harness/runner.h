// runner.h: the generic step main and run_all. A step executable is
//     main() { return fa::step_main(argc, argv, stepNN::info(), &stepMM::info()); }
// (harness/step_entry.cpp); run_all calls fa::run_all_main with every built step in order, each with its PREV.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compare.h"
#include "device_info.h"
#include "ops.h"
#include "timer.h"
#include "tolerance.h"

namespace fa {

struct RunOptions {
  bool check = false, bench = false;
  bool profile = false;  // one warm-up launch, then one launch between cudaProfilerStart/Stop
  std::uint64_t seed = 0;
  TimingOptions timing;
  bool quiet = false;  // csv/json on stdout: progress and check lines go to stderr
  // --input: what the family's resolve() read before any device work, as float in the family's
  // order (softmax: x; matmul: A, B; attention: Q, K, V and, with --bwd, dO, already rounded to
  // the problem's element type). Empty: random inputs from `seed`.
  std::string input_path;  // the --input value those came from (a file or a prefix)
  std::vector<std::vector<float>> inputs;
  std::vector<int> seq_lens;  // attention, --cache-lens: each sequence's length (empty: seq_k each)
  // attention, --inputs randn: random inputs standard normal instead of uniform (attention_inputs.h);
  // the result rows' problems end in " randn".
  bool randn = false;
};

// One row of every results table (run_all, --bench, --sweep).
struct ResultRow {
  std::string step, idea, problem;
  double time_ms = -1;  // median; < 0 when not timed
  double rate = -1;     // GB/s or TFLOP/s, per `unit`
  std::string unit;
  double pct_peak = -1;   // rate / peak_value * 100
  std::string peak_name;  // which ceiling: "copy" (measured) or "fp32" ...
  double peak_value = 0;
  std::string prev_step;  // empty when the step has no predecessor here
  double prev_time_ms = -1;
  double speedup_vs_prev = -1;  // prev time / this time, same problem, same run
  double err_vs_prev = -1;      // max |this - prev| over all outputs; < 0 when not compared
  std::string check;            // "PASS", "FAIL" or "" (not checked)
  std::string baseline;         // a library timed on the same problem in the same run (e.g. cuBLAS)
  double baseline_time_ms = -1;
  double vs_baseline = -1;  // baseline time / this time: > 1 means this step is faster
};

// Fills a row's time and rate: `amount` (bytes or FLOPs) per second, times `per_unit` (1e-9 for
// GB/s, 1e-12 for TFLOP/s), and its percentage of `peak` (in the same unit).
void set_rate(ResultRow& r, double ms, double amount, double per_unit, const char* unit, const char* peak_name,
              double peak);

// For --profile: runs `launch` once to warm up, then once more between cudaProfilerStart and
// cudaProfilerStop, so `ncu --profile-from-start off` captures exactly one launch of the step.
void profile_one_launch(const std::function<void(cudaStream_t)>& launch);

// What a family (softmax, matmul, attention) provides to the generic main.
struct FamilyOps {
  const char* name;
  // Adds this family's shape flags and --input, only those `step` accepts (attention: --dtype
  // offers the step's element types, --bwd only for a step with a backward); `p` (the step's
  // default problem) gives their defaults and receives the values of some of them.
  void (*add_shape_flags)(class ArgParser&, const StepInfo& step, Problem& p);
  Problem (*default_problem)();
  // The benchmark shapes for this step (--sweep), e.g. in the step's element types.
  std::vector<Problem> (*sweep)(const StepInfo& step);
  // After parsing: completes the problem from the flags and reads --input into o.inputs (the
  // shape flags given must match the files), before any device work, so bad input is reported
  // even on a machine without a GPU. May be null.
  void (*resolve)(const class ArgParser&, Problem&, RunOptions& o);
  // Validates a problem for a step (sizes; with a device, memory): throws UsageError with a
  // clear message.
  void (*validate)(const StepInfo&, const Problem&, const DeviceInfo*);
  // The problem the previous step runs beside `p` (on the same inputs): `p` itself, or one the
  // family derives from it (attention: the fp32 version of a fp16/bf16 problem, for an fp32
  // previous step, on the rounded inputs upcast). May be null: always `p`.
  Problem (*prev_problem)(const StepInfo& prev, const Problem& p);
  // Runs `step` (and `prev`, on the same inputs, if not null, on prev_problem(*prev, p)): check
  // and/or time. One row per timed quantity (attention with --bwd: fwd, bwd, fwd+bwd).
  std::vector<ResultRow> (*run)(const StepInfo& step, const StepInfo* prev, const Problem&, const RunOptions&,
                                const DeviceInfo&);
  // The flags of add_shape_flags that --sweep honours (attention: --dtype and --bwd pick the
  // sweep's variant); the others conflict with --sweep, which runs the family's shapes.
  std::vector<std::string> sweep_flags;
};
const FamilyOps& family_ops(Family f);
extern const FamilyOps kSoftmaxFamily, kMatmulFamily, kAttentionFamily;

// The step's default problem, or its family's.
Problem default_problem(const StepInfo& step);

int step_main(int argc, char** argv, const StepInfo& step, const StepInfo* prev);
// A step and the step it is checked against (add_step's PREV), or null.
struct StepAndPrev {
  const StepInfo* step;
  const StepInfo* prev;
};
int run_all_main(int argc, char** argv, const std::vector<StepAndPrev>& steps);

// Output of a set of rows in the chosen format ("table", "csv" or "json").
void print_rows(const std::vector<ResultRow>& rows, const std::string& format, const DeviceInfo& dev);
// The table of print_rows: every column as wide as its widest cell.
std::string format_table(const std::vector<ResultRow>& rows);

// run_all --steps: which of `steps` a comma-separated list selects, each item a step number
// ("1", "01") or a full name; an item naming no step is a UsageError listing the steps.
std::vector<bool> select_steps(const std::string& list, const std::vector<const StepInfo*>& steps);

// "[1, 2, 100, 128]": an array shape in --input messages.
std::string shape_string(const std::vector<std::size_t>& shape);

// Progress and check lines: stdout for tables, stderr when stdout carries csv/json.
void say(const RunOptions& o, const std::string& line);

}  // namespace fa
