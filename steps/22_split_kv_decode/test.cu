// Step 22 (split-KV decoding over a KV cache) against step 11 in the same dtype on problems both
// run (no cache: every sequence seq_k long, causal top-left, seq_q up to 64), and against the fp64
// reference on KV caches with a length per sequence (causal aligned to each sequence's end), with
// the per-row low-precision rule of harness/tolerance.h. make_inputs sets every K/V row past a
// sequence's length to NaN, so a kernel that reads one fails. Split counts are pinned with
// FA_STEP22_SPLITS to take the one-split path, the merge, and splits that see no key. The variant
// two-launches gives the default's bits; rows32 (blocks of 32 rows), unpacked (each query head a group of its
// own) and tiles128 (tiles of 128 keys) are checked against fp64, and the default gives tiles128's bits where
// its rule takes tiles of 128 keys.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "tensor_core_checks.h"

namespace step11 {
const fa::StepInfo& info();
}
namespace step22 {
const fa::StepInfo& info();
}

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step22::info();
const fa::StepInfo& kPrev = step11::info();

// FA_STEP22_SPLITS=n for one scope (0: the heuristic's choice).
struct PinSplits {
  explicit PinSplits(int n) {
    if (n > 0) setenv("FA_STEP22_SPLITS", std::to_string(n).c_str(), 1);
  }
  ~PinSplits() { unsetenv("FA_STEP22_SPLITS"); }
};
// FA_STEP22_ROWS=n (16 or 32) for one scope: a block's rows for groups of more than 16.
struct PinRows {
  explicit PinRows(int n) { setenv("FA_STEP22_ROWS", std::to_string(n).c_str(), 1); }
  ~PinRows() { unsetenv("FA_STEP22_ROWS"); }
};

// Step 22 against fp64 on a KV cache with these lengths; O and LSE per row (NaN fails). Rows of a
// sequence of length 0 must be exactly O = 0, LSE = −inf.
void expect_cache_matches_fp64(const Shape& s, const std::vector<int>& lens) {
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed));
  const Inputs in = fa::attention::make_inputs(s.params(), false, seed, lens);
  fa::attention::Run r(kStep, s.params(), false, in);
  const Outputs got = fa::attention::run_checked(r, false);
  expect_close_lowp_to_fp64(got, s, in, false, "fp64");
  const std::size_t per_seq = std::size_t(s.heads) * s.seq_q;
  for (std::size_t b = 0; b < lens.size(); ++b) {
    if (lens[b] != 0) continue;
    for (std::size_t row = b * per_seq; row < (b + 1) * per_seq; ++row) {
      EXPECT_EQ(got.lse[row], -std::numeric_limits<float>::infinity()) << "row " << row << " of an empty sequence";
      for (int d = 0; d < s.head_dim; ++d) EXPECT_EQ(got.o[row * s.head_dim + d], 0.f) << "row " << row;
    }
  }
}

// Problems step 11 runs too: decode-sized seq_q (1, a few, 64) against short and long key ranges,
// causal (top-left) and not, MHA, GQA and MQA (up to 32 rows per K/V head, and 40: two row blocks).
TEST(Step22SplitKvDecode, MatchesStep11WithoutACache) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128})
      for (const Shape& s : {Shape{2, 8, 1, 1000, d, false, 0, t, 2}, Shape{1, 4, 3, 77, d, true, 0, t},
                             Shape{3, 8, 1, 4096, d, false, 0, t, 1}, Shape{1, 8, 5, 700, d, false, 0, t, 1},
                             Shape{1, 2, 64, 300, d, true, 0, t}, Shape{2, 32, 1, 2048, d, false, 0, t, 8}})
        expect_matches_step(kStep, kPrev, s, false);
}

// KV caches: ragged lengths (0, shorter than a tile, one key, a chunk's edge, the full capacity),
// causal aligned to each sequence's end, MHA, GQA and MQA, both head dims and dtypes; with the
// splits the heuristic picks.
TEST(Step22SplitKvDecode, KvCacheMatchesFp64) {
  for (fa::DType t : kTypes)
    for (int d : {64, 128}) {
      Shape s{4, 8, 1, 2048, d, false, 0, t, 2};
      s.kv_cache = true;
      expect_cache_matches_fp64(s, {0, 5, 2048, 1});
      s.causal = true;
      expect_cache_matches_fp64(s, {64, 1, 2048, 1000});
      Shape g{2, 16, 3, 1500, d, true, 0, t, 1};  // MQA: 48 rows per K/V head, two row blocks
      g.kv_cache = true;
      expect_cache_matches_fp64(g, {1500, 3});
      Shape h{3, 4, 2, 640, d, false, 0, t};  // MHA, two query rows
      h.kv_cache = true;
      expect_cache_matches_fp64(h, {639, 640, 0});
    }
}

// The split paths pinned: one split (O written directly), 2, 3 and 7 splits (chunks of whole tiles,
// the last one short, some empty for the short sequences) and 64 (the most; most of them empty): every count
// gives the same attention within the rule, empty sequence included.
TEST(Step22SplitKvDecode, EverySplitCountMatchesFp64) {
  for (int n : {1, 2, 3, 7, 64}) {
    SCOPED_TRACE("FA_STEP22_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (fa::DType t : kTypes) {
      Shape s{3, 8, 1, 3000, 128, true, 0, t, 2};
      s.kv_cache = true;
      expect_cache_matches_fp64(s, {3000, 130, 1});
      s.causal = false;
      expect_cache_matches_fp64(s, {0, 2999, 64});
    }
  }
}

// One split over a long cache. Each tile rescales a row's sum and O by alpha = 2^((m − m_new)·sl2), which
// must be exactly 1 while the max holds. Formed as 2^(m·sl2 − round(m_new·sl2)), it was 1 plus the rounding
// of the shift (up to half an ulp of m·sl2), compounded once per tile. O cancels it; the LSE does not: over
// the 2048 tiles of 131072 keys, several times the LSE tolerance on the inputs' large-score row (query row 0
// of head 0 is 20x larger, so m·sl2 is in the hundreds) for all but a small range of that rounding.
TEST(Step22SplitKvDecode, OneSplitOverALongCacheKeepsTheLse) {
  PinSplits pin(1);
  for (fa::DType t : kTypes) {
    Shape s{1, 32, 1, 131072, 128, false, 0, t, 1};  // MQA, batch 1
    s.kv_cache = true;
    expect_cache_matches_fp64(s, {131071});
  }
}

// No atomics: the same inputs give the same bits, whatever the split count.
TEST(Step22SplitKvDecode, RunsAreBitwiseRepeatable) {
  Shape s{2, 8, 1, 5000, 128, false, 0, fa::DType::F16, 2};
  s.kv_cache = true;
  const Inputs in = fa::attention::make_inputs(s.params(), false, fa::fresh_seed(), {5000, 4321});
  fa::attention::Run r(kStep, s.params(), false, in);
  const Outputs a = fa::attention::run_checked(r, false), b = fa::attention::run_checked(r, false);
  EXPECT_EQ(std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0);
}

// The two-launches variant merges with the same merge_row in a kernel of its own, so it must give the default's
// bits (one launch): on shapes the rule splits (MQA with 64 splits, GQA, ragged and empty sequences), with 3
// splits pinned, and with 64 pinned. And it is right against fp64 on its own.
TEST(Step22SplitKvDecode, TwoLaunchesGiveTheDefaultsBits) {
  for (int n : {0, 3, 64}) {
    SCOPED_TRACE("FA_STEP22_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (fa::DType t : kTypes)
      for (int d : {64, 128})
        for (Shape s : {Shape{3, 8, 1, 3000, d, false, 0, t, 2}, Shape{1, 32, 1, 20000, d, true, 0, t, 1}}) {
          s.kv_cache = true;
          const std::uint64_t seed = fa::fresh_seed();
          SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed));
          const std::vector<int> lens = s.batch == 3 ? std::vector<int>{3000, 130, 0} : std::vector<int>{19999};
          const Inputs in = fa::attention::make_inputs(s.params(), false, seed, lens);
          fa::AttnParams two = s.params();
          two.variant = 1;  // two-launches
          fa::attention::Run r0(kStep, s.params(), false, in), r1(kStep, two, false, in);
          const Outputs a = fa::attention::run_checked(r0, false), b = fa::attention::run_checked(r1, false);
          EXPECT_EQ(std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)), 0) << "O differs";
          EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "LSE differs";
          expect_close_lowp_to_fp64(b, s, in, false, "fp64 (two-launches)");
        }
  }
}

// A named variant (AttnParams::variant, StepInfo::variants) against fp64 on a KV cache with these lengths.
void expect_variant_matches_fp64(int variant, Shape s, const std::vector<int>& lens) {
  s.kv_cache = true;
  const std::uint64_t seed = fa::fresh_seed();
  SCOPED_TRACE(s.str() + ", variant " + kStep.variants.at(variant) + ", seed " + std::to_string(seed));
  const Inputs in = fa::attention::make_inputs(s.params(), false, seed, lens);
  fa::AttnParams p = s.params();
  p.variant = variant;
  fa::attention::Run r(kStep, p, false, in);
  const Outputs got = fa::attention::run_checked(r, false);
  expect_close_lowp_to_fp64(got, s, in, false, "fp64 (" + kStep.variants[variant] + ")");
}

// The rows32 variant: groups of more than 16 rows (MQA's 32 query heads; 8 heads of 5 queries, 40 rows) in
// blocks of 32 rows (two 16-row fragments per warp), where the default's rule takes blocks of 16 on these
// small grids; right against fp64 with the rule's own split count, 3 pinned, and 64 pinned.
TEST(Step22SplitKvDecode, Rows32MatchesFp64) {
  for (int n : {0, 3, 64}) {
    SCOPED_TRACE("FA_STEP22_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (fa::DType t : kTypes)
      for (int d : {64, 128}) {
        expect_variant_matches_fp64(2, Shape{1, 32, 1, 20000, d, true, 0, t, 1}, {19999});
        expect_variant_matches_fp64(2, Shape{2, 8, 5, 3000, d, false, 0, t, 1}, {3000, 130});
      }
  }
}

// The tiles128 variant (tiles of 128 keys, 32 per warp, blocks of 16 rows): MQA, GQA in three row blocks and
// MHA with lengths that are not multiples of a tile, and an empty sequence; with the rule's split count, one
// split and 3 pinned.
TEST(Step22SplitKvDecode, Tiles128MatchesFp64) {
  for (int n : {0, 1, 3}) {
    SCOPED_TRACE("FA_STEP22_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (fa::DType t : kTypes)
      for (int d : {64, 128}) {
        expect_variant_matches_fp64(4, Shape{1, 32, 1, 20000, d, true, 0, t, 1}, {19999});
        expect_variant_matches_fp64(4, Shape{2, 8, 5, 3000, d, true, 0, t, 1}, {3000, 130});
        expect_variant_matches_fp64(4, Shape{3, 4, 2, 640, d, false, 0, t}, {639, 1, 0});
      }
  }
}

// The rule's tiles of 128 keys (wide_tiles): MQA at batch 1 over 65536 keys (a 16-row rule, 1024 keys a split)
// and at batch 64 over 1024 keys (K and V, 34 MB, within an H100's or H200's L2) take them by default, so the
// default must give the tiles128 variant's bits (64-key tiles split a tile's keys among the warps otherwise, and
// give other bits), and be right against fp64: full and ragged lengths, causal and not.
TEST(Step22SplitKvDecode, TheRulesWideTilesGiveTiles128sBits) {
  int dev = 0, l2 = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), cudaSuccess);
  for (fa::DType t : kTypes)
    for (Shape s : {Shape{1, 32, 1, 65536, 128, false, 0, t, 1}, Shape{64, 32, 1, 1024, 128, true, 0, t, 1}}) {
      s.kv_cache = true;
      if (s.batch == 64 && 4.0 * s.batch * s.seq_k * s.head_dim > l2) continue;  // beyond this GPU's L2: 64-key tiles
      const std::uint64_t seed = fa::fresh_seed();
      SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed));
      std::vector<int> lens(std::size_t(s.batch), s.seq_k);
      for (std::size_t b = 1; b < lens.size(); b += 2) lens[b] = int(b * 37 % std::size_t(s.seq_k));
      const Inputs in = fa::attention::make_inputs(s.params(), false, seed, lens);
      fa::AttnParams wide = s.params();
      wide.variant = 4;  // tiles128
      fa::attention::Run r0(kStep, s.params(), false, in), r1(kStep, wide, false, in);
      const Outputs a = fa::attention::run_checked(r0, false), b = fa::attention::run_checked(r1, false);
      EXPECT_EQ(std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)), 0) << "O differs from tiles128's";
      EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "LSE differs";
      expect_close_lowp_to_fp64(a, s, in, false, "fp64");
    }
}

// The rows pinned (FA_STEP22_ROWS, for measuring the row rule): blocks of 16 and of 32 for MQA's 32 rows and for
// 40 rows (8 heads of 5 queries: blocks of 16, 16 and 8, or 32 and 8), each with 1, 3 and 64 splits pinned.
TEST(Step22SplitKvDecode, PinnedRowsMatchFp64) {
  for (int rows : {16, 32})
    for (int n : {1, 3, 64}) {
      SCOPED_TRACE("FA_STEP22_ROWS=" + std::to_string(rows) + " FA_STEP22_SPLITS=" + std::to_string(n));
      PinRows pin_rows(rows);
      PinSplits pin(n);
      for (fa::DType t : kTypes)
        for (Shape s : {Shape{2, 32, 1, 3000, 128, true, 0, t, 1}, Shape{2, 8, 5, 700, 64, true, 0, t, 1}}) {
          s.kv_cache = true;
          expect_cache_matches_fp64(s, {s.seq_k, 130});
        }
    }
}

// FlashAttention-3's sweep: every case with the query heads of a K/V head packed into one group of rows (the
// default) and unpacked (the variant unpacked: each query head its own group, K and V read once per query head),
// each with 1, 3 and the rule's splits: GQA, MQA and MHA, ragged and empty sequences, several causal query rows.
TEST(Step22SplitKvDecode, PackedAndUnpackedMatchFp64) {
  for (int n : {1, 3, 0}) {
    SCOPED_TRACE("FA_STEP22_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (int variant : {0, 3})  // one-launch (packed), unpacked
      for (fa::DType t : kTypes)
        for (Shape s : {Shape{3, 8, 1, 2000, 128, false, 0, t, 2}, Shape{2, 16, 3, 1500, 64, true, 0, t, 1},
                        Shape{2, 4, 2, 700, 128, true, 0, t}}) {
          s.kv_cache = true;
          const std::vector<int> lens = s.batch == 3 ? std::vector<int>{2000, 0, 77} : std::vector<int>{s.seq_k, 5};
          const std::uint64_t seed = fa::fresh_seed();
          SCOPED_TRACE(s.str() + (variant ? " unpacked" : " packed") + ", seed " + std::to_string(seed));
          const Inputs in = fa::attention::make_inputs(s.params(), false, seed, lens);
          fa::AttnParams p = s.params();
          p.variant = variant;
          fa::attention::Run r(kStep, p, false, in);
          expect_close_lowp_to_fp64(fa::attention::run_checked(r, false), s, in, false, "fp64");
        }
  }
}

// The split heuristic: one split where the grid is full without (many sequences and K/V heads),
// more where it is not, never more than the keys allow (kMinSplitKeys each) or 64.
TEST(Step22SplitKvDecode, SplitsOnlyWhereTheGridIsNotFull) {
  fa::Problem pr = kStep.default_problem();
  fa::AttnParams p = pr.attn;
  p.batch = 64, p.kv_heads = 0, p.seq_k = 131072;  // 64·32 blocks: full
  EXPECT_EQ(kStep.fwd_workspace_bytes(p), 0u);
  p = pr.attn;
  p.batch = 1, p.kv_heads = 1, p.seq_k = 131072;  // one block without splitting
  const std::size_t one = kStep.fwd_workspace_bytes(p);
  EXPECT_GT(one, 0u);
  EXPECT_LE(one, 64 * std::size_t(p.heads) * (p.head_dim + 1) * sizeof(float));
  p.seq_k = 1024;  // at most 1024 / 128 = 8 splits
  EXPECT_EQ(kStep.fwd_workspace_bytes(p), 8 * std::size_t(p.heads) * (p.head_dim + 1) * sizeof(float));
  // 8 sequences · 8 K/V heads = 64 blocks per split: as many splits as one wave of one block per SM
  // holds, rounded down (on 132 SMs 2, not 3: the third would put 60 blocks in a second wave).
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  p = pr.attn;
  p.batch = 8, p.kv_heads = 8, p.seq_k = 1 << 20;  // keys enough for any count
  const std::size_t splits = std::min(sms / 64, 64);  // one split (no workspace) below 2
  EXPECT_EQ(kStep.fwd_workspace_bytes(p),
            splits > 1 ? splits * 8 * std::size_t(p.heads) * (p.head_dim + 1) * sizeof(float) : 0);
}

// The rows of a block, seen through the workspace (splits · rows · (d + 1) floats). MQA at batch 2 (32 rows per
// K/V head): blocks of 32 give 2 blocks per split and min(sms / 2, 64) splits; blocks of 16 give 4 per split
// and sms / 4 splits, a fuller wave on 132 SMs (132 against 128 blocks), so the rule takes 16 and fewer splits;
// rows32 keeps 32. At batch 64 both fill the wave alike (2 splits of 64 blocks, or 1 of 128): 32, the same count.
TEST(Step22SplitKvDecode, RowsOf16WhereTheyFillMoreOfTheWave) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  fa::AttnParams p = kStep.default_problem().attn;
  p.batch = 2, p.kv_heads = 1, p.seq_k = 131072;
  const std::size_t per_split = std::size_t(p.batch) * p.heads * (p.head_dim + 1) * sizeof(float);
  auto splits = [&](int variant) {
    p.variant = variant;
    return kStep.fwd_workspace_bytes(p) / per_split;
  };
  const std::size_t s32 = std::min(sms / 2, 64), s16 = sms / 4;
  if (std::min<std::size_t>(4 * s16, sms) > std::min<std::size_t>(2 * s32, sms))
    EXPECT_EQ(splits(0), s16) << "the default: blocks of 16";
  EXPECT_EQ(splits(2), s32) << "rows32";
  p.batch = 64, p.seq_k = 4096;
  EXPECT_EQ(splits(0), splits(2)) << "batch 64: blocks of 32 either way";
  PinRows pin(16);  // 128 blocks of 16 rows per split at batch 64: one split on 132 SMs, so no workspace
  if (sms < 256) EXPECT_EQ(splits(0), 0u) << "FA_STEP22_ROWS=16 at batch 64";
  p.batch = 2, p.seq_k = 131072;
  EXPECT_EQ(splits(0), std::min<std::size_t>(sms / 4, 64)) << "FA_STEP22_ROWS=16 at batch 2";
}

// fp32, head dims off the rule, prefill-sized seq_q, a cache without its lengths.
TEST(Step22SplitKvDecode, RefusesWhatItCannotRun) {
  refuses_what_it_cannot_run(kStep);
  fa::Problem pr = kStep.default_problem();
  pr.attn.seq_q = 65;
  EXPECT_NE(fa::step_supports(kStep, pr).find("seq_q at most 64"), std::string::npos);
  Shape s{1, 2, 1, 64, 64, false, 0, fa::DType::F16};
  s.kv_cache = true;
  Inputs in = fa::attention::make_inputs(s.params(), false, 1, {64});
  in.seq_lens.clear();
  EXPECT_THROW(fa::attention::Run(kStep, s.params(), false, in), fa::UsageError);
}

}  // namespace
