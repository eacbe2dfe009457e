// Step 07 (FlashAttention-2 backward, fp32, no atomics) against step 04's backward on realistic
// shapes (causal and not, seq_q != seq_k both ways, both head-dim instances), against the fp64
// reference on the golden data, the edge shapes and padded head dims; a row without visible keys
// (LSE = -inf) gets no gradient and makes no NaN; what it refuses.
#include "attention_checks.h"
#include "streams.h"

namespace step04 {
const fa::StepInfo& info();
}
namespace step06 {
const fa::StepInfo& info();
}
namespace step07 {
const fa::StepInfo& info();
}

namespace {
using namespace attention_checks;
const fa::StepInfo& kStep = step07::info();
const fa::StepInfo& kPrev = step04::info();

TEST(Step07FlashBackward, MatchesStep04OnRealisticShapes) {
  for (int d : {64, 128})
    for (bool causal : {false, true}) expect_matches_step(kStep, kPrev, {2, 4, 1024, 1024, d, causal}, true);
}

// seq_q > seq_k: the dK/dV kernel's late query tiles see every key; seq_q < seq_k: causal key
// blocks past the last query get no query tile at all (dK = dV = 0). Lengths that are multiples
// of neither tile (64).
TEST(Step07FlashBackward, MatchesStep04WhenSeqQDiffersFromSeqK) {
  for (int d : {64, 128}) {
    expect_matches_step(kStep, kPrev, {1, 4, 300, 1000, d, true}, true);
    expect_matches_step(kStep, kPrev, {1, 4, 1000, 300, d, true}, true);
    expect_matches_step(kStep, kPrev, {2, 2, 777, 513, d, false}, true);
    expect_matches_step(kStep, kPrev, {2, 2, 513, 777, d, false}, true);
  }
}

TEST(Step07FlashBackward, MatchesGoldenData) { expect_matches_golden(kStep, /*backward=*/true); }

TEST(Step07FlashBackward, MatchesFp64OnEdgeShapes) {
  for (int d : {64, 128})
    for (const Shape& s : edge_shapes(d)) expect_matches_reference(kStep, s, /*backward=*/true);
}

// head_dim below its instance (64 or 128) runs with zero-padded columns; a scale that is not
// 1/sqrt(d).
TEST(Step07FlashBackward, PaddedHeadDimsAndScale) {
  expect_matches_reference(kStep, {1, 2, 50, 70, 40, true, 0.3}, true);
  expect_matches_reference(kStep, {2, 1, 33, 33, 8, false}, true);
  expect_matches_reference(kStep, {1, 2, 130, 90, 100, true}, true);
  expect_matches_reference(kStep, {1, 1, 65, 129, 4, false}, true);
}

// Many tiles in both loops against fp64, the large query row included.
TEST(Step07FlashBackward, LongSequenceMatchesFp64) {
  expect_matches_reference(kStep, {1, 1, 1200, 2100, 64, true}, true);
  expect_matches_reference(kStep, {1, 1, 700, 1500, 128, false}, true);
}

TEST(Step07FlashBackward, RowWithoutVisibleKeysGetsNoGradient) {
  for (int d : {64, 128}) {
    expect_row_without_keys_gets_no_gradient(kStep, {1, 2, 130, 150, d, true}, 70);
    expect_row_without_keys_gets_no_gradient(kStep, {1, 2, 130, 150, d, false}, 0);
  }
}

TEST(Step07FlashBackward, ForwardIsStep06s) { EXPECT_EQ(kStep.attn_fwd, step06::info().attn_fwd); }

TEST(Step07FlashBackward, DefaultProblemIsTheFa2ShapeWithBackward) {
  const fa::Problem p = kStep.default_problem();
  EXPECT_TRUE(p.backward);
  EXPECT_EQ(p.family, fa::Family::Attention);
  EXPECT_EQ(p.attn.batch, 8);
  EXPECT_EQ(p.attn.heads, 32);
  EXPECT_EQ(p.attn.seq_q, 2048);
  EXPECT_EQ(p.attn.seq_k, 2048);
  EXPECT_EQ(p.attn.head_dim, 64);
  EXPECT_FALSE(p.attn.causal);
  EXPECT_EQ(p.attn.dtype, fa::DType::F32);
  EXPECT_FLOAT_EQ(p.attn.scale, 0.125f);
}

TEST(Step07FlashBackward, SupportsOnlyFp32AndHeadDimsUpTo128) {
  fa::Problem pr;
  pr.family = fa::Family::Attention;
  pr.backward = true;
  pr.attn.dtype = fa::DType::F16;
  EXPECT_NE(fa::step_supports(kStep, pr), "");
  pr.attn.dtype = fa::DType::BF16;
  EXPECT_NE(fa::step_supports(kStep, pr), "");
  pr.attn.dtype = fa::DType::F32;
  for (int d : {4, 8, 40, 64, 100, 128}) {
    pr.attn.head_dim = d;
    EXPECT_EQ(fa::step_supports(kStep, pr), "") << "head_dim " << d;
  }
  for (int d : {6, 66, 132, 256}) {
    pr.attn.head_dim = d;
    EXPECT_NE(fa::step_supports(kStep, pr), "") << "head_dim " << d;
  }
}

TEST(Step07FlashBackward, LauncherRefusesUnsupportedProblems) {
  fa::AttnBwdArgs a{};
  a.p.dtype = fa::DType::F16;
  EXPECT_THROW(kStep.attn_bwd(a, nullptr), fa::UsageError);
  a.p.dtype = fa::DType::F32, a.p.head_dim = 256;
  EXPECT_THROW(kStep.attn_bwd(a, nullptr), fa::UsageError);
  a.p.head_dim = 64, a.p.seq_k = 0;
  EXPECT_THROW(kStep.attn_bwd(a, nullptr), fa::UsageError);
}

// The two kernels run on the caller's stream and a side stream (fa::StreamFork). The fork must
// order the caller's earlier work before the side stream's, and the join the side stream's work
// before the caller's later work: a slow kernel (about 2 ms) on one side, a copy on the other.
__global__ void slow_store(int* p, int value) {
  for (int i = 0; i < 2000; ++i) __nanosleep(1000);
  *p = value;
}
__global__ void copy_int(const int* src, int* dst) { *dst = *src; }

TEST(Step07FlashBackward, StreamForkOrdersBothWays) {
  fa::DeviceBuffer<int> buf(3);
  FA_CUDA_CHECK(cudaMemset(buf.get(), 0, 3 * sizeof(int)));
  cudaStream_t stream;
  FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  slow_store<<<1, 1, 0, stream>>>(buf.get(), 7);  // before the fork, on the caller's stream
  {
    fa::StreamFork fork(stream);
    copy_int<<<1, 1, 0, fork.side()>>>(buf.get(), buf.get() + 1);  // must see 7
    slow_store<<<1, 1, 0, fork.side()>>>(buf.get(), 42);
    fork.join();
  }
  copy_int<<<1, 1, 0, stream>>>(buf.get(), buf.get() + 2);  // after the join: must see 42
  FA_CUDA_CHECK(cudaGetLastError());
  int host[3];
  FA_CUDA_CHECK(cudaMemcpyAsync(host, buf.get(), sizeof(host), cudaMemcpyDeviceToHost, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  FA_CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(host[1], 7) << "the side stream ran before the caller's earlier work ended";
  EXPECT_EQ(host[2], 42) << "the caller's stream went on before the side stream's work ended";
}
}  // namespace
