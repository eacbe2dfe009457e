// The softmax family (steps 01-02): inputs, checks and timing for y = softmax(x) row-wise.
#include <algorithm>
#include <climits>
#include <cmath>
#include <thread>
#include <tuple>

#include "buffer.h"
#include "check.h"
#include "cli.h"
#include "compare.h"
#include "npy.h"
#include "runner.h"
#include "softmax_inputs.h"

namespace fa {
namespace {

struct Flags {
  std::string input;
} flags;

void add_flags(ArgParser& p, const StepInfo&, Problem& pr) {
  flags = Flags{};
  p.add_int("--rows", &pr.rows, 1, INT_MAX, "rows of x");
  p.add_int("--cols", &pr.cols, 1, INT_MAX, "row length (softmax is over each row)");
  p.add_string("--input", &flags.input,
               "read x from this .npy file: 2-D [rows, cols] or 1-D (one row); --rows/--cols, if given, must match");
}

Problem make(long long rows, long long cols) {
  Problem p;
  p.family = Family::Softmax;
  p.rows = rows;
  p.cols = cols;
  return p;
}
Problem default_problem() { return make(16384, 16384); }
std::vector<Problem> sweep(const StepInfo&) {
  // Square, few very long rows (one row >> L2 per block), many short rows.
  return {make(16384, 16384), make(64, 4 << 20), make(4096, 4096), make(65536, 1024), make(262144, 128)};
}

NpyArray load_input(const std::string& path) {
  NpyArray a = read_npy(path);
  if (a.shape.size() != 1 && a.shape.size() != 2)
    throw UsageError("'" + path + "': expected a 1-D or 2-D array, got " + std::to_string(a.shape.size()) + "-D");
  if (a.size() == 0) throw UsageError("'" + path + "': the array is empty");
  return a;
}

void resolve(const ArgParser& parser, Problem& p, RunOptions& o) {
  if (flags.input.empty()) return;
  const NpyArray a = load_input(flags.input);
  const long long rows = a.shape.size() == 2 ? (long long)a.shape[0] : 1, cols = (long long)a.shape.back();
  for (auto [flag, given, file] : {std::tuple{"--rows", p.rows, rows}, std::tuple{"--cols", p.cols, cols}})
    if (parser.given(flag) && given != file)
      throw UsageError(std::string(flag) + " " + std::to_string(given) + " does not match '" + flags.input +
                       "' of shape " + shape_string(a.shape));
  p.rows = rows, p.cols = cols;
  o.input_path = flags.input;
  o.inputs = {std::vector<float>(a.data.begin(), a.data.end())};
}

void validate(const StepInfo&, const Problem& p, const DeviceInfo* dev) {
  if (p.rows < 1 || p.cols < 1) throw UsageError("rows and cols must be at least 1");
  if (p.rows > INT_MAX || p.cols > INT_MAX) throw UsageError("rows and cols must each be below 2^31");
  const double n = double(p.rows) * double(p.cols);
  if (n > double(1ll << 31)) throw UsageError(p.describe() + " has more than 2^31 elements");
  if (dev) {
    std::size_t free_b = 0, total_b = 0;
    FA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double need = 3.0 * n * sizeof(float);  // x, y, and the previous step's y
    if (need > 0.9 * double(free_b))
      throw UsageError(p.describe() + " needs " + std::to_string(need / (1 << 30)) + " GiB of device memory; " +
                       std::to_string(free_b / double(1 << 30)) + " GiB free");
  }
}

// Random rows, plus (when there are at least 4 rows) the rows that break a naive softmax:
// row 1 huge magnitudes, row 2 sprinkled with -inf, row 3 entirely -inf (-> all zeros).
std::vector<float> make_input(const Problem& p, const RunOptions& o) {
  const std::size_t rows = p.rows, cols = p.cols;
  if (!o.inputs.empty()) return o.inputs[0];  // --input, read by resolve()
  std::vector<float> x = softmax_random_rows(rows, cols, o.seed);
  if (rows >= 4) {
    for (std::size_t c = 0; c < cols; ++c) x[1 * cols + c] *= 2.5e37f;  // |x| up to 1e38
    for (std::size_t c = 0; c < cols; c += 3) x[2 * cols + c] = -INFINITY;
    for (std::size_t c = 0; c < cols; ++c) x[3 * cols + c] = -INFINITY;
  }
  return x;
}

std::vector<float> launch_once(const StepInfo& s, const SoftmaxArgs& a, DeviceBuffer<float>& y) {
  y.poison_nan();
  s.softmax(a, nullptr);
  FA_CHECK_LAUNCH();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  return y.download();
}

std::vector<ResultRow> run(const StepInfo& step, const StepInfo* prev, const Problem& p, const RunOptions& o,
                           const DeviceInfo& dev) {
  const std::size_t rows = p.rows, cols = p.cols, n = rows * cols;
  const std::vector<std::size_t> shape{rows, cols};
  const std::vector<float> x = make_input(p, o);
  DeviceBuffer<float> dx(x), dy(n), dy_prev(prev ? n : 0);
  const SoftmaxArgs args{dx.get(), dy.get(), int(rows), int(cols)};
  const SoftmaxArgs prev_args{dx.get(), dy_prev.get(), int(rows), int(cols)};

  ResultRow r;
  r.step = step.name;
  r.idea = step.idea;
  r.problem = p.describe();
  if (prev) r.prev_step = prev->name;

  if (o.profile) profile_one_launch([&](cudaStream_t s) { step.softmax(args, s); });
  if (o.check) {
    bool ok = true;
    const std::vector<float> y = launch_once(step, args, dy);
    if (prev) {
      const std::vector<float> yp = launch_once(*prev, prev_args, dy_prev);
      const CompareResult c = compare(y, yp, tol::kSoftmax, shape);
      say(o, std::string("  check ") + step.name + " vs " + prev->name + ": " + c.summary());
      r.err_vs_prev = c.max_abs_err;
      ok &= c.ok();
    }
    const CompareResult c = compare(y, softmax_reference(x, rows, cols), tol::kSoftmax, shape);
    say(o, std::string("  check ") + step.name + " vs fp64 reference: " + c.summary());
    ok &= c.ok();
    r.check = ok ? "PASS" : "FAIL";
  }
  if (o.bench) {
    // Bytes that must move: x read once, y written once.
    const double bytes = 2.0 * double(n) * sizeof(float);
    std::vector<Launch> launches{[&](cudaStream_t s) { step.softmax(args, s); }};
    if (prev) launches.push_back([&](cudaStream_t s) { prev->softmax(prev_args, s); });
    const std::vector<Timing> t = time_interleaved(launches, o.timing);
    FA_CHECK_LAUNCH();
    set_rate(r, t[0].median_ms, bytes, 1e-9, "GB/s", "copy", dev.copy_gbs);
    if (prev) {
      r.prev_time_ms = t[1].median_ms;
      r.speedup_vs_prev = r.prev_time_ms / r.time_ms;
    }
  }
  return {r};
}

}  // namespace

const FamilyOps kSoftmaxFamily{"softmax", add_flags, default_problem, sweep, resolve, validate, nullptr, run, {}};

}  // namespace fa
