// SPDX-License-Identifier: Apache-2.0
// The exact tiled online-softmax path against the fp64 reference, the merge, and seed 004's example.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "one_head.h"
#include "pasa/attention.h"
#include "test_util.h"
#include "tolerance.h"

namespace pasa {
namespace {

using test::Tensor4;

struct Case {
  std::int64_t B, Hq, Hkv, Sq, Skv, D;
  bool causal;
  CausalAlignment alignment;
  bool bshd;
  int block_q, block_kv;
};

// The exact policy (fp32 at every point) on inputs in [-1, 1]: the bound of tolerance.h.
test::AttentionErrorModel exact_model(std::int64_t D, std::int64_t Skv, int block_kv) {
  return test::dot_product_model(test::unit_roundoff(Format::fp32()), static_cast<double>(D),
                                 1.0 / std::sqrt(static_cast<double>(D)), 1.0, 1.0, 1.0,
                                 static_cast<double>(Skv), block_kv);
}

void check_against_reference(const Case& c, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " shape B" << c.B << " Hq" << c.Hq << " Hkv"
                                    << c.Hkv << " Sq" << c.Sq << " Skv" << c.Skv << " D" << c.D
                                    << " causal " << c.causal << " blocks " << c.block_q << "/"
                                    << c.block_kv);
  std::mt19937_64 rng(seed);
  Tensor4 q = test::random_tensor(c.B, c.Hq, c.Sq, c.D, rng, DType::f32, c.bshd);
  Tensor4 k = test::random_tensor(c.B, c.Hkv, c.Skv, c.D, rng, DType::f32, c.bshd);
  Tensor4 v = test::random_tensor(c.B, c.Hkv, c.Skv, c.D, rng, DType::f32, c.bshd);
  Tensor4 o = test::make_tensor(c.B, c.Hq, c.Sq, c.D, DType::f32, c.bshd);
  test::poison(o);
  std::vector<float> lse(static_cast<std::size_t>(c.B * c.Hq * c.Sq), std::nanf(""));
  AttentionArgs args;
  args.q = q.view;
  args.k = k.view;
  args.v = v.view;
  args.o = o.view;
  args.lse = lse_view(lse.data(), c.B, c.Hq, c.Sq);
  args.causal = c.causal;
  args.alignment = c.alignment;
  args.policy.block_q = c.block_q;
  args.policy.block_kv = c.block_kv;
  attention(args);
  const ReferenceResult ref = reference_attention(args);
  const test::AttentionErrorModel model = exact_model(c.D, c.Skv, c.block_kv);
  EXPECT_LE(test::max_abs_diff(test::read_bhsd(o.view), ref.o), test::attention_output_bound(model));
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(ref.lse[i])) {
      ASSERT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "row " << i << " should be fully masked";
    } else {
      ASSERT_NEAR(lse[i], ref.lse[i], test::lse_bound(model, ref.lse[i])) << "row " << i;
    }
  }
}

// The reference ignores o and lse, as documented: it runs without them (it refused an empty o), for a
// broadcast q too.
TEST(Reference, NeedsNoOutputViews) {
  std::mt19937_64 rng(test::fresh_seed());
  Tensor4 q = test::random_tensor(1, 2, 5, 8, rng), kv = test::random_tensor(1, 1, 7, 8, rng);
  Tensor4 o = test::make_tensor(1, 2, 5, 8, DType::f32);
  std::vector<float> lse(10);
  AttentionArgs with{q.view, kv.view, kv.view, o.view, lse_view(lse.data(), 1, 2, 5)};
  AttentionArgs without{q.view, kv.view, kv.view};
  EXPECT_EQ(reference_attention(without).o, reference_attention(with).o);
  without.q.stride[1] = 0;  // both heads read head 0
  with.q.stride[1] = 0;
  EXPECT_EQ(reference_attention(without).lse, reference_attention(with).lse);
}

TEST(ExactAttention, MatchesReferenceOnAwkwardShapes) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const Case cases[] = {
      {1, 1, 1, 1, 1, 64, false, br, false, 64, 64},
      {2, 4, 2, 17, 17, 64, false, br, false, 16, 8},
      {1, 2, 1, 1013, 1013, 64, true, br, false, 64, 64},
      {1, 2, 2, 1013, 1013, 128, true, tl, false, 128, 32},
      {1, 3, 1, 17, 300, 128, true, br, true, 64, 64},   // S_q < S_kv, MQA, BSHD
      {1, 3, 3, 300, 17, 64, true, tl, true, 32, 16},    // S_q > S_kv
      {2, 2, 1, 33, 65, 128, false, br, true, 8, 64},
      {1, 1, 1, 1, 1013, 128, true, br, false, 64, 128}, // decode-like: one query, long cache
  };
  std::uint64_t seed = test::kFixedSeeds[0];
  for (const Case& c : cases) check_against_reference(c, seed++);
}

TEST(ExactAttention, FullyMaskedRowsGiveZeroAndMinusInfinity) {
  // Bottom-right causal with S_q > S_kv: the first S_q - S_kv queries see no key at all.
  const std::uint64_t seed = test::kFixedSeeds[1];
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::int64_t Sq = 9, Skv = 4, D = 64;
  Tensor4 q = test::random_tensor(1, 1, Sq, D, rng), k = test::random_tensor(1, 1, Skv, D, rng),
          v = test::random_tensor(1, 1, Skv, D, rng), o = test::make_tensor(1, 1, Sq, D, DType::f32);
  test::poison(o);
  std::vector<float> lse(Sq, 0.0f);
  AttentionArgs args{q.view, k.view, v.view, o.view, lse_view(lse.data(), 1, 1, Sq)};
  args.causal = true;
  attention(args);
  const std::vector<double> out = test::read_bhsd(o.view);
  for (std::int64_t r = 0; r < Sq; ++r) {
    const bool masked = r < Sq - Skv;
    EXPECT_EQ(std::isinf(lse[r]) && lse[r] < 0, masked) << "row " << r;
    for (std::int64_t d = 0; d < D; ++d) {
      ASSERT_TRUE(std::isfinite(out[r * D + d]));
      if (masked) ASSERT_EQ(out[r * D + d], 0.0);
    }
  }
  check_against_reference({1, 2, 1, Sq, Skv, D, true, CausalAlignment::bottom_right, false, 4, 2}, seed);
}

// Scores that overflow the policy's S format to -inf are not masked keys, but a key block whose visible
// scores all did adds nothing (its exact weights, e^-81920 beside finite scores, are 0): it made every row
// NaN (e^(-inf - (-inf))), by s2 (one block of 256 keys was finite). A row whose visible scores all
// overflowed is NaN: its exact softmax is finite, and 0 would hide that the policy lost it.
TEST(Attention, AKeyBlockWhoseScoresAllOverflowAddsNothing) {
  std::mt19937_64 rng(test::kFixedSeeds[0]);
  const std::int64_t S = 256, D = 64;
  Tensor4 q = test::make_tensor(1, 1, 4, D, DType::f16), k = test::random_tensor(1, 1, S, D, rng, DType::f16),
          v = test::random_tensor(1, 1, S, D, rng, DType::f16), o = test::make_tensor(1, 1, 4, D, DType::f32);
  for (std::int64_t i = 0; i < 4 * D; ++i) store_from_double(q.bytes.data(), DType::f16, i, 32.0);
  for (std::int64_t i = 128 * D; i < S * D; ++i) store_from_double(k.bytes.data(), DType::f16, i, -40.0);
  std::vector<float> lse(4);
  AttentionArgs args{q.view, k.view, v.view, o.view, lse_view(lse.data(), 1, 1, 4)};
  for (const char* policy : {"fa16_fp32", "fa16", "fa16_fp32,splits=2"}) {
    SCOPED_TRACE(policy);
    args.policy = parse_policy(policy);
    test::poison(o);
    attention(args);
    const ReferenceResult ref = reference_attention(args);
    const std::vector<double> out = test::read_bhsd(o.view);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref.o[i], 2e-2) << i;
    for (int r = 0; r < 4; ++r) EXPECT_NEAR(lse[r], ref.lse[r], 0.1) << r;
  }
  // Every key overflowing: the rows are NaN, not 0.
  for (std::int64_t i = 0; i < S * D; ++i) store_from_double(k.bytes.data(), DType::f16, i, -40.0);
  args.policy = parse_policy("fa16_fp32");
  attention(args);
  EXPECT_TRUE(std::isnan(test::read_bhsd(o.view)[0]));
  EXPECT_TRUE(std::isnan(lse[0]));
}

// What that rule leaves alone. A NaN score (q . k = inf - inf in fp32, exactly 0) is no overflow: alone
// in its key block (s2 = 64, key 64) it makes the row NaN, as in a block of 128. And PASA's S' of -inf
// is relative to its block's shift: causal row 128 sees keys 0-128, and key 128 (score 0) sits in a
// block of hidden keys at 50000, whose mean pushes its S' past -65504: its weight is about 1/129, not
// 0, so the row stays NaN (docs/numerics.md, the limits of S').
TEST(Attention, NanScoresAndPasaShiftsAreNotOverflowedBlocks) {
  std::mt19937_64 rng(test::kFixedSeeds[1]);
  for (const char* policy : {"exact,s2=64", "exact,s2=128"}) {
    SCOPED_TRACE(policy);
    Tensor4 q = test::make_tensor(1, 1, 1, 2, DType::f32), k = test::make_tensor(1, 1, 65, 2, DType::f32),
            v = test::random_tensor(1, 1, 65, 2, rng), o = test::make_tensor(1, 1, 1, 2, DType::f32);
    for (std::int64_t i = 0; i < 2; ++i) store_from_double(q.bytes.data(), DType::f32, i, 1e30);
    store_from_double(k.bytes.data(), DType::f32, 64 * 2, 1e30);
    store_from_double(k.bytes.data(), DType::f32, 64 * 2 + 1, -1e30);
    AttentionArgs args{q.view, k.view, v.view, o.view};
    args.policy = parse_policy(policy);
    attention(args);
    EXPECT_TRUE(std::isnan(test::read_bhsd(o.view)[0]));
  }
  const std::int64_t S = 256, D = 64;
  Tensor4 q = test::make_tensor(1, 1, S, D, DType::f16), k = test::random_tensor(1, 1, S, D, rng, DType::f16),
          v = test::random_tensor(1, 1, S, D, rng, DType::f16), o = test::make_tensor(1, 1, S, D, DType::f32);
  for (std::int64_t i = 0; i < S * D; ++i) store_from_double(q.bytes.data(), DType::f16, i, 1.0);
  for (std::int64_t i = 128 * D; i < S * D; ++i) store_from_double(k.bytes.data(), DType::f16, i, i < 129 * D ? 0.0 : 6250.0);
  AttentionArgs args{q.view, k.view, v.view, o.view};
  args.policy = parse_policy("pasa");
  args.causal = true;
  attention(args);
  const std::vector<double> out = test::read_bhsd(o.view);
  EXPECT_TRUE(std::isnan(out[128 * D]));
  for (std::int64_t r = 0; r < 128; ++r) ASSERT_TRUE(std::isfinite(out[r * D])) << "row " << r;
}

TEST(ExactAttention, Seed004WorkedExample) {
  // One query, scores x = [1..6] (D = 1, q = 1, k = x, scale 1) and v = [1..6]: o = 5.4329, printed
  // to four decimals, hence the tolerance of half a unit in the last printed place.
  float q = 1.0f, k[6], v[6], o = 0.0f;
  for (int i = 0; i < 6; ++i) k[i] = v[i] = static_cast<float>(i + 1);
  for (int block : {1, 2, 4, 6}) {
    AttentionArgs args{bhsd_view(&q, DType::f32, 1, 1, 1, 1), bhsd_view(k, DType::f32, 1, 1, 6, 1),
                       bhsd_view(v, DType::f32, 1, 1, 6, 1), bhsd_view(&o, DType::f32, 1, 1, 1, 1)};
    args.scale = 1.0;
    args.policy.block_kv = block;
    attention(args);
    EXPECT_NEAR(o, 5.4329, 5e-5) << "block " << block;
    EXPECT_NEAR(reference_attention(args).o[0], 5.4329, 5e-5);
  }
}

TEST(Merge, TwoHalvesOfTheKeysEqualTheWhole) {
  const std::uint64_t seed = test::kFixedSeeds[2];
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const std::int64_t B = 2, H = 3, Sq = 19, Skv = 77, D = 64, half = 40;
  Tensor4 q = test::random_tensor(B, H, Sq, D, rng), k = test::random_tensor(B, H, Skv, D, rng),
          v = test::random_tensor(B, H, Skv, D, rng);
  auto run = [&](std::int64_t k0, std::int64_t k1, Tensor4& o, std::vector<float>& lse) {
    auto slice = [&](const Tensor4& t) {
      TensorView s = t.view;
      s.data = static_cast<float*>(s.data) + k0 * s.stride[2];
      s.shape[2] = k1 - k0;
      return s;
    };
    o = test::make_tensor(B, H, Sq, D, DType::f32);
    lse.assign(B * H * Sq, 0.0f);
    AttentionArgs args{q.view, slice(k), slice(v), o.view, lse_view(lse.data(), B, H, Sq)};
    attention(args);
  };
  Tensor4 oa, ob, ow;
  std::vector<float> la, lb, lw;
  run(0, half, oa, la);
  run(half, Skv, ob, lb);
  run(0, Skv, ow, lw);
  Tensor4 om = test::make_tensor(B, H, Sq, D, DType::f32);
  std::vector<float> lm(B * H * Sq);
  merge_partials(oa.view, lse_view(la.data(), B, H, Sq), ob.view, lse_view(lb.data(), B, H, Sq), om.view,
                 lse_view(lm.data(), B, H, Sq));
  // Each of the two is within the exact policy's bound of the true attention (the fp64 merge adds
  // only an fp32 rounding of each part's O and LSE), so they are within twice of each other.
  const test::AttentionErrorModel model = exact_model(D, Skv, AttentionArgs{}.policy.block_kv);
  EXPECT_LE(test::max_abs_diff(test::read_bhsd(om.view), test::read_bhsd(ow.view)),
            2.0 * test::attention_output_bound(model));
  for (std::size_t i = 0; i < lm.size(); ++i) EXPECT_NEAR(lm[i], lw[i], 2.0 * test::lse_bound(model, lw[i]));
}

TEST(Merge, BothPartsEmptyGiveZeroAndMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  float oa[2] = {1, 2}, ob[2] = {3, 4}, om[2] = {7, 7}, la = -inf, lb = -inf, lm = 0;
  merge_partials(bhsd_view(oa, DType::f32, 1, 1, 1, 2), lse_view(&la, 1, 1, 1),
                 bhsd_view(ob, DType::f32, 1, 1, 1, 2), lse_view(&lb, 1, 1, 1),
                 bhsd_view(om, DType::f32, 1, 1, 1, 2), lse_view(&lm, 1, 1, 1));
  EXPECT_EQ(om[0], 0.0f);
  EXPECT_EQ(om[1], 0.0f);
  EXPECT_TRUE(std::isinf(lm) && lm < 0);
}

// Equal parts weigh half each whatever their LSE: weights taken as exp(lse - merged) were 1 and 1 once
// |LSE| passed about 1e9 (log 2 added to 1e17 is lost to the double's rounding): O came out 3, not 1.5.
// Such LSEs are a scale of 1e15-1e20 on two equal keys, which pasa::attention runs.
TEST(Merge, EqualPartsWeighHalfAtAnyLse) {
  for (const float big : {0.0f, 1e8f, 1e15f, 1e17f, -1e17f, 3e38f}) {
    SCOPED_TRACE(big);
    float oa = 1, ob = 2, om = 0, la = big, lb = big, lm = 0;
    merge_partials(bhsd_view(&oa, DType::f32, 1, 1, 1, 1), lse_view(&la, 1, 1, 1),
                   bhsd_view(&ob, DType::f32, 1, 1, 1, 1), lse_view(&lb, 1, 1, 1),
                   bhsd_view(&om, DType::f32, 1, 1, 1, 1), lse_view(&lm, 1, 1, 1));
    EXPECT_EQ(om, 1.5f);
    EXPECT_EQ(lm, static_cast<float>(static_cast<double>(big) + std::log(2.0)));
  }
}

// The merge checks its tensors as pasa::attention does, naming each, before writing: a null LSE was
// reported as its output's, a negative input stride was read before the buffer, and an empty shape
// or an output stride of 0 went through.
TEST(Merge, BadTensorsAreRefusedNamingThem) {
  float oa[2] = {1, 2}, ob[2] = {3, 4}, om[2] = {7, 7}, la = 0, lb = 0, lm = 7;
  const auto a = bhsd_view(oa, DType::f32, 1, 1, 1, 2), b = bhsd_view(ob, DType::f32, 1, 1, 1, 2);
  const auto o = bhsd_view(om, DType::f32, 1, 1, 1, 2);
  const LseView lse_b = lse_view(&lb, 1, 1, 1);
  const auto merge = [&](TensorView va, LseView lsa, TensorView vo, LseView lso) {
    return [=] { merge_partials(va, lsa, b, lse_b, vo, lso); };
  };
  test::expect_error(merge(a, LseView{}, o, lse_view(&lm, 1, 1, 1)), "lse_a: data pointer is null");
  TensorView negative = a;
  negative.stride[3] = -1;
  test::expect_error(merge(negative, lse_view(&la, 1, 1, 1), o, lse_view(&lm, 1, 1, 1)),
                     "o_a: stride of the head dim dimension is -1");
  test::expect_error(merge(bhsd_view(oa, DType::f32, 1, 1, 0, 2), lse_view(&la, 1, 1, 0),
                           bhsd_view(om, DType::f32, 1, 1, 0, 2), lse_view(&lm, 1, 1, 0)),
                     "o_a: sequence size is 0");
  TensorView overlapping = o;
  overlapping.stride[3] = 0;
  test::expect_error(merge(a, lse_view(&la, 1, 1, 1), overlapping, lse_view(&lm, 1, 1, 1)),
                     "o: stride of the head dim dimension is 0 (must be positive)");
  EXPECT_EQ(om[0], 7.0f);
  EXPECT_EQ(lm, 7.0f);
  // A size-1 dimension's stride is never read: any is taken, the output LSE's included.
  LseView lse_out = lse_view(&lm, 1, 1, 1);
  lse_out.stride[2] = 0;
  merge(a, lse_view(&la, 1, 1, 1), o, lse_out)();
  EXPECT_EQ(om[0], 2.0f);
  EXPECT_FLOAT_EQ(lm, std::log(2.0f));
}

}  // namespace
}  // namespace pasa
