// Step 23 (split-KV decoding over a paged KV cache) against step 22 on the same cache held contiguous,
// and against the fp64 reference, with the per-row low-precision rule of harness/tolerance.h. The
// harness scatters K and V into a pool of pages through a shuffled block table (page_inputs): every row
// of a page no sequence's length covers, and every row past a length, is NaN, so a kernel that reads
// one fails; the references read K and V back through the same table. Page sizes 1, 16, 64 and 256;
// lengths 0, 1, not a multiple of the page size or of a tile; causal aligned to each sequence's end
// with seq_q up to 16 (speculative decoding); MHA, GQA, MQA. Split counts pinned with FA_STEP23_SPLITS
// (1, 3) and the heuristic's; the query heads of a K/V head packed together (the default) or not (unpacked).
#include <cstdlib>
#include <cstring>
#include <limits>

#include "tensor_core_checks.h"

namespace step22 {
const fa::StepInfo& info();
}
namespace step23 {
const fa::StepInfo& info();
}

namespace {
using namespace tensor_core_checks;
const fa::StepInfo& kStep = step23::info();
const fa::StepInfo& kPrev = step22::info();

// FA_STEP23_SPLITS=n for one scope (0: the heuristic's choice).
struct PinSplits {
  explicit PinSplits(int n) {
    if (n > 0) setenv("FA_STEP23_SPLITS", std::to_string(n).c_str(), 1);
  }
  ~PinSplits() { unsetenv("FA_STEP23_SPLITS"); }
};

// Step 23 on `s` paged in pages of `page` keys, against fp64 (O and LSE per row, NaN fails) and, on the
// same cache held contiguous, step 22 (every element within the rule). Rows of an empty sequence must be
// exactly O = 0, LSE = −inf.
void expect_paged_matches(Shape s, const std::vector<int>& lens, int page) {
  const std::uint64_t seed = fa::fresh_seed();
  s.kv_cache = true;
  SCOPED_TRACE(s.str() + ", page size " + std::to_string(page) + ", seed " + std::to_string(seed));
  const fa::AttnParams paged = fa::attention::paged_params(s.params(), lens, page);
  Inputs in = fa::attention::make_inputs(paged, false, seed, lens);
  fa::attention::page_inputs(paged, in, seed + 1);
  fa::attention::Run r(kStep, paged, false, in);
  const Outputs got = fa::attention::run_checked(r, false);
  expect_close_lowp_to_fp64(got, s, in, false, "fp64");
  fa::attention::Run prev(kPrev, s.params(), false, in);  // the same K, V, contiguous
  const Outputs want = fa::attention::run_checked(prev, false);
  expect_close_lowp(got, want.o, want.lse, lowp_reference(s, in), s, kPrev.name);
  const std::size_t per_seq = std::size_t(s.heads) * s.seq_q;
  for (std::size_t b = 0; b < lens.size(); ++b) {
    if (lens[b] != 0) continue;
    for (std::size_t row = b * per_seq; row < (b + 1) * per_seq; ++row) {
      EXPECT_EQ(got.lse[row], -std::numeric_limits<float>::infinity()) << "row " << row << " of an empty sequence";
      for (int d = 0; d < s.head_dim; ++d) EXPECT_EQ(got.o[row * s.head_dim + d], 0.f) << "row " << row;
    }
  }
}

TEST(Step23PagedKvDecode, EveryPageSizeMatchesFp64AndStep22) {
  for (int page : {1, 16, 64, 256})
    for (fa::DType t : kTypes)
      for (int d : {64, 128}) {
        expect_paged_matches(Shape{4, 8, 1, 2048, d, false, 0, t, 2}, {0, 5, 2048, 1}, page);  // GQA
        expect_paged_matches(Shape{4, 8, 1, 2048, d, true, 0, t, 2}, {64, 1, 2048, 1000}, page);
      }
}

// Step 22's tiles of 128 keys, which the rule takes for MQA at batch 1 over long caches and at batch 64 over 1024
// keys (K and V within an H100's or H200's L2): gathered through pages of 16 and of 1, ragged lengths included.
TEST(Step23PagedKvDecode, TheRulesWideTilesMatchFp64AndStep22) {
  for (int page : {16, 1})
    for (fa::DType t : kTypes) {
      expect_paged_matches(Shape{1, 32, 1, 65536, 128, false, 0, t, 1}, {65536 - 77}, page);
      std::vector<int> lens(64, 1024);
      for (std::size_t b = 1; b < lens.size(); b += 2) lens[b] = int(b * 37 % 1024);
      expect_paged_matches(Shape{64, 32, 1, 1024, 128, true, 0, t, 1}, lens, page);
    }
}

// The page of key j is found by a multiply-high and a shift (PageDiv), not a division: every page size from
// 2 to 40, some past a tile (65, 100, 1000) and one larger than the cache (4096), on lengths that divide by none.
TEST(Step23PagedKvDecode, PageDivisionHoldsForManyPageSizes) {
  std::vector<int> pages;
  for (int page = 2; page <= 40; ++page) pages.push_back(page);
  for (int page : {65, 100, 1000, 4096}) pages.push_back(page);
  for (int page : pages)
    expect_paged_matches(Shape{3, 4, 1, 1500, 64, false, 0, fa::DType::F16, 2}, {1500, 1499, 777}, page);
}

// Speculative decoding: up to 16 query rows per head, causal at each sequence's end; MQA (two row
// blocks of the group's rows) and MHA; lengths that are multiples of nothing.
TEST(Step23PagedKvDecode, SeveralQueryRowsCausalAtEachEnd) {
  for (fa::DType t : kTypes)
    for (int page : {16, 7})
      for (int sq : {2, 16}) {
        expect_paged_matches(Shape{2, 16, sq, 1500, 128, true, 0, t, 1}, {1500, 37}, page);
        expect_paged_matches(Shape{3, 4, sq, 640, 64, true, 0, t}, {639, 640, 16}, page);
      }
}

// The split paths pinned (one split; three, some empty for the short sequences) and the heuristic's.
TEST(Step23PagedKvDecode, EverySplitCountMatches) {
  for (int n : {1, 3, 0}) {
    SCOPED_TRACE("FA_STEP23_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (fa::DType t : kTypes) {
      expect_paged_matches(Shape{3, 8, 1, 3000, 128, true, 0, t, 2}, {3000, 130, 1}, 16);
      expect_paged_matches(Shape{1, 32, 1, 20000, 128, false, 0, t, 1}, {19999}, 64);  // batch 1, MQA: many splits
    }
  }
}

// The offsets table's four slots for a ring of three: one split of 1 to 10 tiles, each length one short of, at
// and one past a whole number of tiles, so that the prologue, the reuse of each slot and the last tiles' guard
// (t + 4 < n_tiles) meet every phase; the 16-row and 32-row instances in tiles of 64 keys, and the 16-row one in
// tiles of 128 (batch 1, MQA over a long capacity: the rule's wide tiles), in pages of 1, 7 and 16.
TEST(Step23PagedKvDecode, EveryTileCountThroughTheOffsetsTable) {
  PinSplits pin(1);
  auto lens_of = [](int tile) {
    std::vector<int> lens;
    for (int n = 1; n <= 9; ++n)
      for (int e : {-1, 0, 1}) lens.push_back(tile * n + e);
    return lens;
  };
  for (int page : {1, 7, 16}) {
    for (int d : {64, 128}) {
      expect_paged_matches(Shape{27, 8, 1, 577, d, false, 0, fa::DType::F16, 2}, lens_of(64), page);    // 16 rows
      expect_paged_matches(Shape{27, 32, 1, 577, d, false, 0, fa::DType::BF16, 1}, lens_of(64), page);  // 32 rows
    }
    for (int len : lens_of(128))  // tiles of 128 keys
      expect_paged_matches(Shape{1, 32, 1, 65536, 128, false, 0, fa::DType::F16, 1}, {len}, page);
  }
}

// One split over a long paged cache: the row sum's rescale must be exactly 1 while the max holds (step 22's
// OneSplitOverALongCacheKeepsTheLse says why a rounded shift fails this), in pages of 16.
TEST(Step23PagedKvDecode, OneSplitOverALongCacheKeepsTheLse) {
  PinSplits pin(1);
  for (fa::DType t : kTypes)
    expect_paged_matches(Shape{1, 32, 1, 131072, 128, false, 0, t, 1}, {131071}, 16);
}

// FlashAttention-3's sweep, paged: every case with the query heads of a K/V head packed into one group of rows
// (the default) and unpacked (the variant unpacked: each query head its own group), each with 1, 3 and the
// rule's splits; GQA, MQA with several causal query rows, MHA; shuffled pages of 16 and of 7 keys.
TEST(Step23PagedKvDecode, PackedAndUnpackedMatchFp64) {
  for (int n : {1, 3, 0}) {
    SCOPED_TRACE("FA_STEP23_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (int variant : {0, 2})  // one-launch (packed), unpacked
      for (int page : {16, 7})
        for (fa::DType t : kTypes)
          for (Shape s : {Shape{3, 8, 1, 2000, 128, false, 0, t, 2}, Shape{2, 16, 3, 1500, 64, true, 0, t, 1},
                          Shape{2, 4, 2, 700, 128, true, 0, t}}) {
            s.kv_cache = true;
            const std::vector<int> lens = s.batch == 3 ? std::vector<int>{2000, 0, 77} : std::vector<int>{s.seq_k, 5};
            const std::uint64_t seed = fa::fresh_seed();
            SCOPED_TRACE(s.str() + (variant ? " unpacked" : " packed") + ", page size " + std::to_string(page) +
                         ", seed " + std::to_string(seed));
            fa::AttnParams paged = fa::attention::paged_params(s.params(), lens, page);
            Inputs in = fa::attention::make_inputs(paged, false, seed, lens);
            fa::attention::page_inputs(paged, in, seed + 1);
            paged.variant = variant;
            fa::attention::Run r(kStep, paged, false, in);
            expect_close_lowp_to_fp64(fa::attention::run_checked(r, false), s, in, false, "fp64");
          }
  }
}

// No atomics: the same inputs give the same bits.
TEST(Step23PagedKvDecode, RunsAreBitwiseRepeatable) {
  Shape s{2, 8, 1, 5000, 128, false, 0, fa::DType::F16, 2};
  s.kv_cache = true;
  const std::vector<int> lens{5000, 4321};
  const fa::AttnParams paged = fa::attention::paged_params(s.params(), lens, 16);
  Inputs in = fa::attention::make_inputs(paged, false, fa::fresh_seed(), lens);
  fa::attention::page_inputs(paged, in, 3);
  fa::attention::Run r(kStep, paged, false, in);
  const Outputs a = fa::attention::run_checked(r, false), b = fa::attention::run_checked(r, false);
  EXPECT_EQ(std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0);
}

// The two-launches variant (step 22's): the same merge in a kernel of its own, so the default's bits (one
// launch), paged, with the rule's splits (batch 1, MQA: 64 of them), 3 pinned, and 64 pinned on a grid too large
// to be resident at once (where the default falls back to two launches).
TEST(Step23PagedKvDecode, TwoLaunchesGiveTheDefaultsBits) {
  for (int n : {0, 3, 64}) {
    SCOPED_TRACE("FA_STEP23_SPLITS=" + std::to_string(n));
    PinSplits pin(n);
    for (fa::DType t : kTypes)
      for (Shape s : {Shape{3, 8, 1, 3000, 128, false, 0, t, 2}, Shape{1, 32, 1, 20000, 64, true, 0, t, 1}}) {
        s.kv_cache = true;
        const std::vector<int> lens = s.batch == 3 ? std::vector<int>{3000, 130, 0} : std::vector<int>{19999};
        const std::uint64_t seed = fa::fresh_seed();
        SCOPED_TRACE(s.str() + ", seed " + std::to_string(seed));
        const fa::AttnParams paged = fa::attention::paged_params(s.params(), lens, 16);
        Inputs in = fa::attention::make_inputs(paged, false, seed, lens);
        fa::attention::page_inputs(paged, in, seed + 1);
        fa::AttnParams two = paged;
        two.variant = 1;  // two-launches
        fa::attention::Run r0(kStep, paged, false, in), r1(kStep, two, false, in);
        const Outputs a = fa::attention::run_checked(r0, false), b = fa::attention::run_checked(r1, false);
        EXPECT_EQ(std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)), 0) << "O differs";
        EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)), 0) << "LSE differs";
        expect_close_lowp_to_fp64(b, s, in, false, "fp64 (two-launches)");
      }
  }
}

// A contiguous cache (step 22's) is refused with the reason; so are a paged problem without its table,
// and fp32, head dims off the rule, prefill-sized seq_q.
TEST(Step23PagedKvDecode, RefusesWhatItCannotRun) {
  fa::Problem pr = kStep.default_problem();
  ASSERT_GT(pr.attn.page_size, 0);
  pr.attn.seq_q = 65;
  EXPECT_NE(fa::step_supports(kStep, pr).find("seq_q at most 64"), std::string::npos);
  pr = kStep.default_problem();
  pr.attn.page_size = 0;
  EXPECT_NE(fa::step_supports(kStep, pr).find("paged KV cache only"), std::string::npos);
  Shape s{1, 2, 1, 64, 64, false, 0, fa::DType::F16};
  s.kv_cache = true;
  const fa::AttnParams paged = fa::attention::paged_params(s.params(), {64}, 16);
  Inputs in = fa::attention::make_inputs(paged, false, 1, {64});  // not paged: no table, no pages
  EXPECT_THROW(fa::attention::Run(kStep, paged, false, in), fa::UsageError);
}

}  // namespace
