// Step 11 (tuned forward: template instances + autotuner) against step 10 in the same dtype, and
// against the fp64 reference, with the per-row low-precision rule of
// harness/tolerance.h (2·max|ref_lowp − ref| + 1 ulp per query row; LSE to fp32 tolerance).
// The shared checks of tests/tensor_core_checks.h (both dtypes, both head-dim instances, causal
// and not, ragged lengths, seq_q ≠ seq_k both ways, padded head dims, what it refuses), plus what
// is particular to this step.
#include <cstdlib>
#include <cstring>

#include "tensor_core_checks.h"

namespace step10 {
const fa::StepInfo& info();
}
namespace step11 {
const fa::StepInfo& info();
int candidate_count(int head_dim);
std::string candidate_name(int head_dim, int i);
void tune(const fa::AttnFwdArgs& a, cudaStream_t stream);
}  // namespace step11

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step11::info();
const fa::StepInfo& kPrev = step10::info();

TEST(Step11TunedForward, MatchesStep10OnRealisticShapes) { matches_prev_on_realistic_shapes(kStep, kPrev); }
TEST(Step11TunedForward, MatchesStep10WhenSeqQDiffersFromSeqK) {
  matches_prev_when_seq_q_differs_from_seq_k(kStep, kPrev);
}
TEST(Step11TunedForward, MatchesGoldenInputs) { matches_golden_inputs(kStep); }
TEST(Step11TunedForward, MatchesFp64OnEdgeShapes) { matches_fp64_on_edge_shapes(kStep); }
TEST(Step11TunedForward, PaddedHeadDims) { matches_fp64_with_padded_head_dims(kStep); }
TEST(Step11TunedForward, LongSequenceMatchesFp64) { matches_fp64_on_a_long_sequence(kStep); }
TEST(Step11TunedForward, GroupedKvHeadsMatchFp64AndRepeatedMha) { grouped_kv_heads_match_fp64_and_repeated_mha(kStep); }
TEST(Step11TunedForward, RefusesWhatItCannotRun) { refuses_what_it_cannot_run(kStep); }

// Every candidate instance, not only the ones the autotuner picks here: each against fp64 on
// ragged shapes that take the masked, unmasked and partial-tile paths, both dtypes.
TEST(Step11TunedForward, EveryCandidateMatchesFp64) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (int i = 0; i < step11::candidate_count(d); ++i) {
        const std::string name = step11::candidate_name(d, i);
        SCOPED_TRACE("candidate " + name);
        setenv("FA_STEP11_CONFIG", name.c_str(), 1);  // bypasses the tuner (kernel.cu, pick())
        for (const Shape& s : {Shape{1, 2, 333, 333, d, true, 0, t}, Shape{2, 2, 300, 1000, d, false, 0, t},
                               Shape{1, 3, 1000, 300, d, true, 0, t}, Shape{1, 2, 1, 77, d, false, 0, t}})
          expect_matches_reference(kStep, s, false);
        unsetenv("FA_STEP11_CONFIG");
      }
}

// The tuner's choice is cached per problem class: a second call of the same class gives the
// same bits (same instance), and a class of another length is tuned on its own.
TEST(Step11TunedForward, TunedChoiceIsStable) {
  for (fa::DType t : kTypes) {
    const Shape s{2, 4, 1024, 1024, 128, false, 0, t};
    const Inputs in = random_inputs(s, fa::fresh_seed());
    const Outputs a = run(kStep, s, in, false), b = run(kStep, s, in, false);
    EXPECT_EQ(a.o, b.o);
    EXPECT_EQ(a.lse, b.lse);
  }
}

// A CUDA graph. A tuned launch is pure launches, so it can be captured: launched once directly
// (which tunes the class), then captured on a stream, the graph replayed; O and LSE must equal the
// direct launch's bit for bit (same instance, same inputs). A class not tuned yet cannot be timed
// inside a capture: the launch refuses with a UsageError, and step11::tune() outside the capture
// makes the class capturable.
struct Graph {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  Graph() { FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
  // Captures fn(stream) into the graph and instantiates it; rethrows what fn throws, capture ended.
  template <class Fn>
  void capture(Fn fn) {
    FA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      fn(stream);
    } catch (...) {
      cudaGraph_t dropped = nullptr;
      cudaStreamEndCapture(stream, &dropped);
      if (dropped) cudaGraphDestroy(dropped);
      throw;
    }
    FA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    FA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  }
  void replay() {
    FA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

// Captures one launch of the step on `dev`'s buffers, poisons O and LSE, then replays the graph.
void replay_in_graph(fa::attention::Run& dev) {
  const fa::AttnFwdArgs args = dev.fwd;
  Graph g;
  g.capture([&](cudaStream_t st) { kStep.attn_fwd(args, st); });
  dev.o.poison_nan();
  dev.lse.poison_nan();
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  g.replay();
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Step11TunedForward, TunedLaunchReplaysInACudaGraphBitForBit) {
  unsetenv("FA_STEP11_CONFIG");
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) {
      const Shape s{2, 3, 700, 900, d, true, 0, t};
      const std::uint64_t seed = fa::fresh_seed();
      SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed));
      const Inputs in = random_inputs(s, seed);
      fa::attention::Run dev(kStep, s.params(), false, in);
      dev.checked_forward();  // direct: tunes the class
      const std::vector<float> o = dev.o.download(), lse = dev.lse.download();
      replay_in_graph(dev);
      EXPECT_TRUE(same_bits(dev.o.download(), o)) << "O";
      EXPECT_TRUE(same_bits(dev.lse.download(), lse)) << "LSE";
    }
}

TEST(Step11TunedForward, UntunedClassRefusesCaptureUntilTuned) {
  unsetenv("FA_STEP11_CONFIG");
  // Lengths no other test uses (seq_q bucket 2^2, seq_k bucket 2^13): a class not tuned yet.
  const Shape s{1, 2, 3, 5000, 128, false, 0, fa::DType::BF16};
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Inputs in = random_inputs(s, seed);
  fa::attention::Run dev(kStep, s.params(), false, in);
  const fa::AttnFwdArgs args = dev.fwd;
  {
    Graph g;
    try {
      g.capture([&](cudaStream_t st) { kStep.attn_fwd(args, st); });
      ADD_FAILURE() << "an untuned class was captured";
    } catch (const fa::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("launch once before the capture"), std::string::npos) << e.what();
    }
  }
  step11::tune(args, nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  replay_in_graph(dev);
  const LowpReference ref = lowp_reference(s, in);
  expect_close_lowp(Outputs{dev.o.download(), dev.lse.download()}, ref.o, ref.lse, ref, s, "fp64, graph replay");
}
}  // namespace
