// The matmul family (step 03): C = alpha · op(A) · op(B) in fp32, checked against fp64 and timed
// against cuBLAS SGEMM in the same run.
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <thread>
#include <tuple>

#include "buffer.h"
#include "check.h"
#include "cli.h"
#include "npy.h"
#include "random.h"
#include "reference.h"
#include "runner.h"

namespace fa {
namespace {

#define FA_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                             \
    const cublasStatus_t st_ = (call);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                              \
      throw CudaError(std::string("cuBLAS error ") + cublasGetStatusString(st_) + " from " #call); \
  } while (0)

struct Flags {
  long long m = 4096, n = 4096, k = 4096, size = 0, batch = 1;
  std::string layout = "nn", input;
} flags;

Problem make(long long m, long long n, long long k, MatmulLayout layout, long long batch = 1) {
  Problem p;
  p.family = Family::Matmul;
  p.M = m, p.N = n, p.K = k, p.layout = layout, p.batch = batch;
  return p;
}

const char* layout_name(MatmulLayout l) { return l == MatmulLayout::NT ? "nt" : l == MatmulLayout::NN ? "nn" : "tn"; }
// The shapes of A and B in a layout, for messages.
const char* operand_shapes(MatmulLayout l) {
  return l == MatmulLayout::NT   ? "A [M, K], B [N, K]"
         : l == MatmulLayout::NN ? "A [M, K], B [K, N]"
                                 : "A [K, M], B [K, N]";
}

void add_flags(ArgParser& parser, const StepInfo&, Problem& p) {
  flags = Flags{p.M, p.N, p.K, 0, p.batch, layout_name(p.layout), ""};
  parser.add_int("--m", &flags.m, 1, INT_MAX, "rows of C");
  parser.add_int("--n", &flags.n, 1, INT_MAX, "columns of C");
  parser.add_int("--k", &flags.k, 1, INT_MAX, "the reduction length");
  parser.add_int("--size", &flags.size, 1, INT_MAX, "sets --m, --n and --k at once");
  parser.add_int("--batch", &flags.batch, 1, 65535, "independent products (strided batch)");
  parser.add_string("--layout", &flags.layout, "nt: C = A·Bᵀ, nn: C = A·B, tn: C = Aᵀ·B (row-major)",
                    {"nt", "nn", "tn"});
  parser.add_string("--input", &flags.input,
                    "read A and B from PREFIX.a.npy and PREFIX.b.npy (2-D, or 3-D [batch, ...]; shapes per "
                    "--layout); the shape flags given must match");
  for (const char* f : {"--m", "--n", "--k"}) parser.conflicts("--size", f, "--size sets all three");
}

// Reads --input's A and B, and sets M, N, K and batch from their shapes, checking the shape
// flags given against them.
void read_input(const ArgParser& parser, Problem& p, RunOptions& o) {
  const std::string pa = flags.input + ".a.npy", pb = flags.input + ".b.npy";
  const NpyArray A = read_npy(pa), B = read_npy(pb);
  const std::string shapes = "'" + pa + "' is " + shape_string(A.shape) + ", '" + pb + "' is " + shape_string(B.shape);
  const std::string rule = std::string(" (--layout ") + layout_name(p.layout) + ": " + operand_shapes(p.layout) +
                           ", optionally with a leading batch dimension)";
  const std::size_t rank = A.shape.size();
  if (rank < 2 || rank > 3 || B.shape.size() != rank)
    throw UsageError(shapes + ": expected two 2-D or two 3-D arrays" + rule);
  const std::size_t batch = rank == 3 ? A.shape[0] : 1, o0 = rank - 2;
  const bool a_km = p.layout == MatmulLayout::TN, b_nk = p.layout == MatmulLayout::NT;
  const std::size_t M = A.shape[o0 + (a_km ? 1 : 0)], Ka = A.shape[o0 + (a_km ? 0 : 1)];
  const std::size_t N = B.shape[o0 + (b_nk ? 0 : 1)], Kb = B.shape[o0 + (b_nk ? 1 : 0)];
  if (rank == 3 && B.shape[0] != batch) throw UsageError(shapes + ": the batch dimensions differ");
  if (Ka != Kb)
    throw UsageError(shapes + ": A has K = " + std::to_string(Ka) + ", B has K = " + std::to_string(Kb) + rule);
  if (M == 0 || N == 0 || Ka == 0 || batch == 0) throw UsageError(shapes + ": an array is empty");
  const std::string from = " does not match the --input files: " + shapes + ", so M = " + std::to_string(M) +
                           ", N = " + std::to_string(N) + ", K = " + std::to_string(Ka) +
                           ", batch = " + std::to_string(batch) + rule;
  for (auto [flag, value, file] :
       {std::tuple{"--m", p.M, M}, std::tuple{"--n", p.N, N}, std::tuple{"--k", p.K, Ka}, std::tuple{"--size", p.M, M},
        std::tuple{"--size", p.N, N}, std::tuple{"--size", p.K, Ka}, std::tuple{"--batch", p.batch, batch}})
    if (parser.given(flag) && std::size_t(value) != file)
      throw UsageError(std::string(flag) + " " + std::to_string(value) + from);
  p.M = (long long)M, p.N = (long long)N, p.K = (long long)Ka, p.batch = (long long)batch;
  o.input_path = flags.input;
  o.inputs = {std::vector<float>(A.data.begin(), A.data.end()), std::vector<float>(B.data.begin(), B.data.end())};
}

void resolve(const ArgParser& parser, Problem& p, RunOptions& o) {
  p.M = flags.size ? flags.size : flags.m;
  p.N = flags.size ? flags.size : flags.n;
  p.K = flags.size ? flags.size : flags.k;
  p.batch = flags.batch;
  p.layout = flags.layout == "nt" ? MatmulLayout::NT : flags.layout == "nn" ? MatmulLayout::NN : MatmulLayout::TN;
  if (!flags.input.empty()) read_input(parser, p, o);
}

Problem default_problem() { return make(4096, 4096, 4096, MatmulLayout::NN); }

std::vector<Problem> sweep(const StepInfo&) {
  std::vector<Problem> out;
  for (MatmulLayout l : {MatmulLayout::NN, MatmulLayout::NT, MatmulLayout::TN})
    for (long long s : {1024, 2048, 4096, 8192}) out.push_back(make(s, s, s, l));
  // The shapes naive attention (step 04) runs: S = Q·Kᵀ, O = P·V, dV = Pᵀ·dO at seq 2048, d 64.
  out.push_back(make(2048, 2048, 64, MatmulLayout::NT, 256));
  out.push_back(make(2048, 64, 2048, MatmulLayout::NN, 256));
  out.push_back(make(2048, 64, 2048, MatmulLayout::TN, 256));
  return out;
}

std::size_t a_elems(const Problem& p) { return std::size_t(p.M) * p.K; }
std::size_t b_elems(const Problem& p) { return std::size_t(p.K) * p.N; }
std::size_t c_elems(const Problem& p) { return std::size_t(p.M) * p.N; }

void validate(const StepInfo&, const Problem& p, const DeviceInfo* dev) {
  if (p.M < 1 || p.N < 1 || p.K < 1 || p.batch < 1) throw UsageError("M, N, K and batch must be at least 1");
  const double total = double(p.batch) * (double(a_elems(p)) + double(b_elems(p)) + 2.0 * double(c_elems(p)));
  if (double(p.batch) * std::max({a_elems(p), b_elems(p), c_elems(p)}) > double(1ll << 32))
    throw UsageError(p.describe() + ": a matrix batch has more than 2^32 elements");
  if (dev) {
    std::size_t free_b = 0, total_b = 0;
    FA_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (total * sizeof(float) > 0.9 * double(free_b))
      throw UsageError(p.describe() + " needs " + std::to_string(total * 4 / double(1 << 30)) +
                       " GiB of device memory; " + std::to_string(free_b / double(1 << 30)) + " GiB free");
  }
}

// Row-major C = alpha·op(A)·op(B) is column-major Cᵀ = alpha·op(B)ᵀ·op(A)ᵀ: cuBLAS gets the
// operands swapped, and a row-major buffer read as column-major is the transpose.
void cublas_matmul(cublasHandle_t h, const MatmulArgs& a, cudaStream_t s) {
  const float zero = 0.f;
  FA_CUBLAS_CHECK(cublasSetStream(h, s));
  const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  const bool b_nk = a.layout == MatmulLayout::NT, a_km = a.layout == MatmulLayout::TN;
  FA_CUBLAS_CHECK(cublasSgemmStridedBatched(h, b_nk ? T : N, a_km ? T : N, a.N, a.M, a.K, &a.alpha, a.B,
                                            b_nk ? a.K : a.N, a.stride_b, a.A, a_km ? a.M : a.K, a.stride_a, &zero, a.C,
                                            a.N, a.stride_c, a.batch));
}

// fp64 reference of the sampled rows of C, for batch entries 0 and batch-1 (all rows if small).
struct Sampled {
  std::vector<std::size_t> index;  // into C (batch-major)
  std::vector<double> value;
};
Sampled reference_rows(const Problem& p, const std::vector<float>& A, const std::vector<float>& B) {
  const int M = int(p.M), N = int(p.N), K = int(p.K);
  const double macs_per_row = double(N) * K;
  const int rows = int(std::min<double>(M, std::max(1.0, double(1 << 28) / macs_per_row)));  // CPU budget
  std::vector<int> picked;
  for (int i = 0; i < rows; ++i) picked.push_back(rows == M ? i : int((long long)i * (M - 1) / std::max(1, rows - 1)));
  std::vector<long long> batches{0};
  if (p.batch > 1) batches.push_back(p.batch - 1);
  Sampled out;
  for (long long b : batches) {
    const float* Ab = A.data() + b * a_elems(p);
    const float* Bb = B.data() + b * b_elems(p);
    std::vector<double> a_rows(std::size_t(rows) * K), bd(Bb, Bb + b_elems(p)), c(std::size_t(rows) * N);
    for (int r = 0; r < rows; ++r)
      for (int kk = 0; kk < K; ++kk)
        a_rows[std::size_t(r) * K + kk] =
            p.layout == MatmulLayout::TN ? Ab[std::size_t(kk) * M + picked[r]] : Ab[std::size_t(picked[r]) * K + kk];
    ref::matmul(a_rows.data(), bd.data(), c.data(), rows, N, K, 1.0, p.layout == MatmulLayout::NT);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < N; ++j) {
        out.index.push_back(std::size_t(b) * c_elems(p) + std::size_t(picked[r]) * N + j);
        out.value.push_back(c[std::size_t(r) * N + j]);
      }
  }
  return out;
}

std::vector<ResultRow> run(const StepInfo& step, const StepInfo*, const Problem& p, const RunOptions& o,
                           const DeviceInfo& dev) {
  const std::size_t na = p.batch * a_elems(p), nb = p.batch * b_elems(p), nc = p.batch * c_elems(p);
  std::vector<float> A(na), B(nb);
  if (!o.inputs.empty()) {  // --input, read by resolve()
    A = o.inputs[0], B = o.inputs[1];
  } else {
    fill_uniform(A, o.seed, -1.f, 1.f);
    fill_uniform(B, o.seed + 1, -1.f, 1.f);
  }
  DeviceBuffer<float> dA(A), dB(B), dC(nc), dC_blas(nc);
  MatmulArgs args{dA.get(),
                  dB.get(),
                  dC.get(),
                  int(p.M),
                  int(p.N),
                  int(p.K),
                  1.f,
                  p.layout,
                  int(p.batch),
                  (long long)a_elems(p),
                  (long long)b_elems(p),
                  (long long)c_elems(p)};
  MatmulArgs blas_args = args;
  blas_args.C = dC_blas.get();
  cublasHandle_t handle;
  FA_CUBLAS_CHECK(cublasCreate(&handle));
  FA_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // plain FP32 SGEMM (no TF32)
  struct Guard {
    cublasHandle_t h;
    ~Guard() { cublasDestroy(h); }
  } guard{handle};

  ResultRow r;
  r.step = step.name;
  r.idea = step.idea;
  r.problem = p.describe();
  r.baseline = "cuBLAS SGEMM";

  if (o.profile) profile_one_launch([&](cudaStream_t s) { step.matmul(args, s); });
  if (o.check) {
    dC.poison_nan();
    dC_blas.poison_nan();
    step.matmul(args, nullptr);
    FA_CHECK_LAUNCH();
    cublas_matmul(handle, blas_args, nullptr);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> C = dC.download(), C_blas = dC_blas.download();
    const Sampled ref = reference_rows(p, A, B);
    std::vector<float> picked(ref.index.size()), picked_blas(ref.index.size());
    for (std::size_t i = 0; i < ref.index.size(); ++i)
      picked[i] = C[ref.index[i]], picked_blas[i] = C_blas[ref.index[i]];
    const Tolerance tol = scaled_tolerance(tol::kMatmulAtolRel, tol::kMatmulRtol, ref.value);
    const CompareResult c_ref = compare(picked, ref.value, tol);
    const CompareResult c_blas_ref = compare(picked_blas, ref.value, tol);
    const CompareResult c_blas = compare(C, C_blas, tol, {std::size_t(p.batch), std::size_t(p.M), std::size_t(p.N)});
    say(o, std::string("  check ") + step.name + " vs fp64 reference (" + std::to_string(ref.index.size()) +
               " elements of sampled rows): " + c_ref.summary());
    say(o, std::string("  check ") + step.name + " vs cuBLAS (every element): " + c_blas.summary());
    say(o, "  check cuBLAS vs fp64 reference (same rows): " + c_blas_ref.summary());
    r.check = c_ref.ok() && c_blas.ok() ? "PASS" : "FAIL";
  }
  if (o.bench) {
    const std::vector<Timing> t = time_interleaved(
        {[&](cudaStream_t s) { step.matmul(args, s); }, [&](cudaStream_t s) { cublas_matmul(handle, blas_args, s); }},
        o.timing);
    FA_CHECK_LAUNCH();
    const double flop = 2.0 * double(p.batch) * double(p.M) * double(p.N) * double(p.K);
    set_rate(r, t[0].median_ms, flop, 1e-12, "TFLOP/s", "fp32", dev.fp32_peak_tflops);
    r.baseline_time_ms = t[1].median_ms;
    r.vs_baseline = r.baseline_time_ms / r.time_ms;
  }
  return {r};
}

}  // namespace

const FamilyOps kMatmulFamily{"matmul", add_flags, default_problem, sweep, resolve, validate, nullptr, run, {}};

}  // namespace fa
