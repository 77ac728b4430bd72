// SPDX-License-Identifier: Apache-2.0
// The split-KV decode kernel (S_q <= 16, the exact and fdpp policies) against the fp64 reference, with
// the CPU emulator running the same policy as the yardstick (cuda_case_harness.h states the rule):
// GQA / MQA packing, one split and many, causal both alignments, FlashDecoding++'s unified max and its
// recomputed rows, head dims 64 to 256. It serves both CUDA paths. Without a GPU of compute capability
// 8.0 or newer every test is skipped.
#include <cstring>

#include "cuda/host/decode_params.h"
#include "cuda_case_harness.h"

namespace pasa {
namespace {

// Decode shapes: B 1..4, 32 query heads over 8 K/V heads (GQA, 16 packed rows at S_q = 4) or one
// (MQA: 32+ packed rows, two m-tiles, several row chunks), S_q 1 / 4 / 16, S_kv 1 to 16k+ (one
// split to many), causal bottom-right (a shorter key range per query row; fully masked rows when
// S_q > S_kv) and top-left.
std::vector<Case> decode_cases(DType in) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const DType f32 = DType::f32;
  return {
      {1, 32, 8, 1, 1, 128, false, br, false, in, in},       // S_kv = 1
      {2, 32, 8, 1, 17, 64, false, br, false, in, f32},
      {4, 32, 8, 1, 1000, 128, false, br, true, in, in},     // BSHD
      {1, 32, 8, 4, 1000, 64, true, br, false, in, f32},     // 16 packed rows, causal
      {2, 32, 1, 1, 4096, 128, false, br, false, in, in},    // MQA: 32 packed rows, two m-tiles
      {1, 32, 8, 16, 4096, 128, true, br, false, in, f32},   // 64 packed rows: two row chunks
      {3, 32, 1, 4, 1000, 64, true, br, true, in, in},       // MQA, S_q = 4: four row chunks
      {1, 32, 8, 1, 16411, 128, false, br, false, in, in},   // long: many splits, a tail tile
      {1, 32, 8, 16, 17, 64, true, br, false, in, f32},
      {1, 8, 8, 16, 10, 128, true, br, false, in, f32},      // S_q > S_kv: fully masked rows
      {1, 4, 2, 16, 300, 64, true, tl, false, in, f32},      // top-left
  };
}

TEST(CudaDecode, ExactMatchesReferenceFp16) {
  REQUIRE_GPU();
  for (const Case& c : decode_cases(DType::f16)) check_case(c, exact_policy(DType::f16));
}

TEST(CudaDecode, ExactMatchesReferenceBf16) {
  REQUIRE_GPU();
  for (const Case& c : decode_cases(DType::bf16)) check_case(c, exact_policy(DType::bf16));
}

// The policy's splits > 1 fix the split count (here against the emulator's exact merge of as many);
// negative and zero scales as in the prefill kernel; stats are filled without a sync.
TEST(CudaDecode, PolicySplitsScalesAndStats) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  Policy split5 = exact_policy(DType::f16);
  split5.splits = 5;
  Extra extra;
  check_case({1, 32, 8, 4, 3000, 128, true, br, false, DType::f16, DType::f32}, split5, split5, std::nullopt,
             &extra);
  EXPECT_EQ(extra.kernel_stats.rows, 32 * 4);
  EXPECT_EQ(extra.kernel_stats.recomputed_rows, 0);
  for (const double scale : {-0.2, 0.0}) {
    check_case({2, 32, 8, 1, 700, 64, false, br, false, DType::bf16, DType::bf16}, exact_policy(DType::bf16),
               exact_policy(DType::bf16), scale);
  }
}

// The last split of a group to finish merges the group's partials: splits within one round of a
// thread's loads (32 at head dim 128) and past it (140: more than 32 a thread even where 4 threads
// share a piece's splits), with fewer (row, 4-column) pieces than the CTA's 128 threads (MHA at one
// query, 16 or 32 pieces: threads share a piece's splits and fold through shared memory), beside
// GQA's 4 rows and MQA's 32 (two m-tiles).
TEST(CudaDecode, ManySplitsMergedByTheLastSplit) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  const DType bf16 = DType::bf16, f32 = DType::f32;
  for (const int splits : {20, 140}) {
    SCOPED_TRACE(::testing::Message() << splits << " splits");
    Policy policy = exact_policy(bf16);
    policy.splits = splits;
    check_case({1, 4, 4, 1, 8960, 128, false, br, false, bf16, bf16}, policy);  // MHA: 32 pieces a row
    check_case({2, 8, 8, 1, 8960, 64, false, br, false, bf16, f32}, policy);    // MHA: 16
    check_case({2, 32, 8, 1, 8960, 128, false, br, false, bf16, bf16}, policy); // GQA: 4 rows
    check_case({1, 32, 1, 1, 8960, 128, true, br, false, bf16, f32}, policy);   // MQA: 32 rows
  }
}

// FlashDecoding++ with small scores: no row leaves the window, nothing is recomputed, and the result
// equals the synchronized algorithm's (fdpp,shift=none, the same splits) within rounding.
TEST(CudaDecode, FdppSmallScoresMatchTheSynchronizedResult) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  const Policy unified = preset_policy("fdpp");  // the split count chosen from the shape
  const Policy sync = parse_policy("fdpp,shift=none");
  Policy four_splits = unified;
  four_splits.splits = 4;  // the policy's split count
  const Case cases[] = {{2, 32, 8, 4, 2048, 128, false, br, false, DType::f16, DType::f32},
                        {1, 32, 1, 16, 5000, 64, true, br, false, DType::bf16, DType::bf16},
                        {3, 32, 8, 1, 1000, 128, false, br, true, DType::bf16, DType::f16}};
  for (const Case& c : cases) {
    for (const Policy& pol : {unified, four_splits}) {
      const auto seed = test::fresh_seed();
      Extra u, s;
      check_case(c, pol, pol, std::nullopt, &u, seed);
      Policy pol_sync = sync;
      pol_sync.splits = pol.splits;
      check_case(c, pol_sync, pol_sync, std::nullopt, &s, seed);
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(c) << " " << to_string(pol));
      const std::int64_t rows = c.B * c.Hq * c.Sq;
      EXPECT_EQ(u.kernel_stats.rows, rows);
      EXPECT_EQ(u.kernel_stats.recomputed_rows, 0);
      EXPECT_EQ(u.emulator_stats.recomputed_rows, 0);
      EXPECT_LT(test::relative_rmse(u.kernel_o, s.kernel_o), 2e-3) << "unified vs synchronized kernel";
    }
  }
}

// fa16_fp32 has the fields of fdpp,shift=none but for the block sizes (which decode does not use), so it
// is the same policy to the dispatch: the same kernel, bit for bit.
TEST(CudaDecode, Fa16Fp32DecodesAsTheSynchronizedFdpp) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  const Case c{2, 32, 8, 1, 3000, 128, false, br, false, DType::bf16, DType::f32};
  const auto seed = test::fresh_seed();
  Extra sync, fa16_fp32;
  check_case(c, parse_policy("fdpp,shift=none"), parse_policy("fdpp,shift=none"), std::nullopt, &sync, seed);
  check_case(c, preset_policy("fa16_fp32"), preset_policy("fa16_fp32"), std::nullopt, &fa16_fp32, seed);
  EXPECT_EQ(sync.kernel_o, fa16_fp32.kernel_o);
}

// Large scores (x - phi far above window_hi): every row is recomputed with the synchronized path and
// counted, and the result is the synchronized kernel's, bit for bit.
TEST(CudaDecode, FdppLargeScoresAreRecomputedAndCounted) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  const Policy unified = preset_policy("fdpp");
  const Policy sync = parse_policy("fdpp,shift=none");
  const Case cases[] = {{1, 32, 8, 4, 600, 64, false, br, false, DType::f16, DType::f32},
                        {2, 32, 1, 1, 3000, 128, true, br, false, DType::bf16, DType::f16}};
  for (const Case& c : cases) {
    const auto seed = test::fresh_seed();
    Extra u, s;
    check_case(c, unified, unified, 2.0, &u, seed, 0.5, 1.5);
    check_case(c, sync, sync, 2.0, &s, seed, 0.5, 1.5);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(c));
    const std::int64_t rows = c.B * c.Hq * c.Sq;
    EXPECT_EQ(u.emulator_stats.recomputed_rows, rows);
    EXPECT_EQ(u.kernel_stats.recomputed_rows, rows);
    EXPECT_EQ(u.kernel_stats.rows, rows);
    ASSERT_EQ(u.kernel_o.size(), s.kernel_o.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < u.kernel_o.size(); ++i) differ += u.kernel_o[i] != s.kernel_o[i];
    EXPECT_EQ(differ, 0u) << "recomputed rows differ from the synchronized kernel's";
    EXPECT_EQ(std::memcmp(u.kernel_lse.data(), s.kernel_lse.data(), u.kernel_lse.size() * sizeof(float)), 0);
  }
}

// Scores far below phi (phi = 14, scores within about +-3): every weight e^(x - phi) is below fp16's
// smallest normal, where P would lose its bits or vanish (O = 0), so every row must leave the window
// at its lower end and be recomputed, on the kernel as in the emulator.
TEST(CudaDecode, FdppScoresFarBelowPhiAreRecomputed) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  const Policy unified = parse_policy("fdpp,phi=14");
  const Case cases[] = {{1, 32, 8, 1, 4096, 128, false, br, false, DType::bf16, DType::bf16},
                        {2, 8, 2, 4, 700, 64, true, br, true, DType::f16, DType::f32}};
  for (const Case& c : cases) {
    const auto seed = test::fresh_seed();
    Extra u;
    check_case(c, unified, unified, std::nullopt, &u, seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(c));
    const std::int64_t rows = c.B * c.Hq * c.Sq;
    EXPECT_EQ(u.emulator_stats.recomputed_rows, rows);
    EXPECT_EQ(u.kernel_stats.recomputed_rows, rows);
  }
}

// The decode kernel at head dims 96 and 256 (where the device grants its shared memory): exact and
// fdpp (unified, synchronized, and the recomputed rows of large scores), f16 and bf16 inputs (head dim
// 96's rows of 12 16-byte chunks do not divide the CTA's threads: fdpp's rounding of bf16 K and V in
// shared memory takes the row-major chunk order), one and two m-tiles (two at 96 only), one split and
// many, the policy's split count, causal both alignments, GQA and MQA.
std::vector<Case> decode_head_dim_cases(DType in, std::int64_t D) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const DType f32 = DType::f32;
  return {
      {1, 32, 8, 1, 1, D, false, br, false, in, in},        // S_kv = 1
      {2, 32, 8, 4, 1000, D, true, br, true, in, f32},      // 16 packed rows, causal, BSHD
      {2, 32, 1, 1, 4096, D, false, br, false, in, in},     // MQA: 32 packed rows
      {1, 32, 8, 16, 3000, D, true, br, false, in, f32},    // 64 packed rows: row chunks
      {1, 8, 8, 16, 10, D, true, br, false, in, f32},       // S_q > S_kv: fully masked rows
      {1, 4, 2, 16, 300, D, true, tl, false, in, f32},      // top-left
  };
}

// (no GPU needed) The tile each head dim decodes on where a CTA may take 99 KiB of shared memory
// (sm_86, sm_89, sm_120) and where it may take 227 KiB (sm_90); test_serving.py runs the compact tile
// on a GPU under PASA_CUDA_SMEM_LIMIT.
TEST(CudaDecodeTile, HeadDim128TakesTheCompactTileWhereTheTunedOneDoesNotFit) {
  constexpr int k99KB = 101376, k227KB = 232448;
  for (const int m_tiles : {1, 2}) {
    const cuda::DecodeTile small = cuda::decode_tile_for(128, m_tiles, k99KB);
    EXPECT_TRUE(cuda::decode_tile_is_compact(small)) << m_tiles;
    EXPECT_LE(small.smem_bytes(m_tiles), k99KB) << m_tiles;
    EXPECT_GT(cuda::decode_tile(128).smem_bytes(m_tiles), k99KB) << m_tiles;
    EXPECT_FALSE(cuda::decode_tile_is_compact(cuda::decode_tile_for(128, m_tiles, k227KB))) << m_tiles;
    for (const int D : {64, 96}) {  // the tuned tiles fit
      EXPECT_FALSE(cuda::decode_tile_is_compact(cuda::decode_tile_for(D, m_tiles, k99KB))) << D;
      EXPECT_LE(cuda::decode_tile_for(D, m_tiles, k99KB).smem_bytes(m_tiles), k99KB) << D;
    }
  }
  // Head dim 256 has no tile that fits (the dispatch refuses it there, naming the bytes).
  EXPECT_GT(cuda::decode_tile_for(256, 1, k99KB).smem_bytes(1), k99KB);
}

TEST(CudaDecode, HeadDims96And256) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  const Policy unified = preset_policy("fdpp"), sync = parse_policy("fdpp,shift=none");
  int ran = 0;
  for (const int D : {96, 256}) {
    if (!device_grants_shared_memory(cuda::decode_tile(D).smem_bytes(cuda::decode_m_tiles(D, 32)))) {
      std::printf("  head dim %d: the device does not grant the decode kernel's shared memory\n", D);
      continue;
    }
    ++ran;
    for (const DType in : {DType::f16, DType::bf16}) {
      for (const Case& c : decode_head_dim_cases(in, D)) {
        check_case(c, exact_policy(in));
        check_case(c, unified);
        check_case(c, sync);
      }
    }
    Policy split5 = exact_policy(DType::f16);
    split5.splits = 5;
    check_case({1, 32, 8, 4, 3000, D, true, br, false, DType::f16, DType::f32}, split5);
    // Large scores: every row leaves the window and is recomputed, as the emulator counts.
    const Case c{1, 32, 8, 4, 600, D, false, br, false, DType::bf16, DType::f16};
    Extra extra;
    check_case(c, unified, unified, 2.0, &extra, std::nullopt, 0.5, 1.5);
    EXPECT_EQ(extra.kernel_stats.recomputed_rows, c.B * c.Hq * c.Sq);
    EXPECT_EQ(extra.emulator_stats.recomputed_rows, c.B * c.Hq * c.Sq);
  }
  if (ran == 0) GTEST_SKIP() << "the device grants neither head dim's decode CTA its shared memory";
}

}  // namespace
}  // namespace pasa
