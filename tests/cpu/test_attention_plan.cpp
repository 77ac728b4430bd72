// SPDX-License-Identifier: Apache-2.0
// AttentionPlan on the CPU emulator: run() gives what pasa::attention gives, bit for bit, for every
// preset and for new tensors of the planned problem; a call whose problem differs is refused before
// anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pasa/attention_plan.h"
#include "test_util.h"

namespace pasa {
namespace {

using test::Tensor4;

struct Problem {
  Tensor4 q, k, v, o;
  std::vector<float> lse;
  AttentionArgs args;
  explicit Problem(std::uint64_t seed, std::int64_t S_q = 17, std::int64_t S_kv = 70) {
    std::mt19937_64 rng(seed);
    q = test::random_tensor(2, 4, S_q, 32, rng, DType::f16);
    k = test::random_tensor(2, 2, S_kv, 32, rng, DType::f16, true);
    v = test::random_tensor(2, 2, S_kv, 32, rng, DType::f16, true);
    o = test::make_tensor(2, 4, S_q, 32, DType::f32);
    test::poison(o);
    lse.assign(static_cast<std::size_t>(2 * 4 * S_q), std::nanf(""));
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.o = o.view;
    args.lse = lse_view(lse.data(), 2, 4, S_q);
    args.causal = true;
  }
};

TEST(AttentionPlan, RunEqualsAttentionForEveryPresetAndNewTensors) {
  for (const std::string& preset : preset_names()) {
    const auto seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << preset);
    Problem planned(seed);
    planned.args.policy = preset_policy(preset);
    const AttentionPlan plan(planned.args);
    EXPECT_EQ(plan.workspace_bytes(), 0u);
    for (std::uint64_t call = 0; call < 2; ++call) {  // other tensors (new pointers) of the same problem
      Problem by_plan(seed + call), eager(seed + call);
      by_plan.args.policy = eager.args.policy = planned.args.policy;
      AttentionStats stats;
      by_plan.args.stats = &stats;
      plan.run(by_plan.args);
      attention(eager.args);
      EXPECT_EQ(by_plan.o.bytes, eager.o.bytes);
      EXPECT_EQ(std::memcmp(by_plan.lse.data(), eager.lse.data(), eager.lse.size() * sizeof(float)), 0);
      EXPECT_EQ(stats.rows, 2 * 4 * 17);
    }
  }
}

// A size-1 dimension's stride addresses nothing (DLPack from torch before 2.9 exports it as 1): a call
// that differs from the planned one only there runs on the plan, with the eager call's bits.
TEST(AttentionPlan, StridesOfSizeOneDimensionsMayDiffer) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Problem planned(seed, 1, 70), by_plan(seed, 1, 70), eager(seed, 1, 70);  // one query a sequence
  const AttentionPlan plan(planned.args);
  for (TensorView* t : {&by_plan.args.q, &by_plan.args.o}) t->stride[2] = 1;
  ASSERT_NE(by_plan.args.q.stride, planned.args.q.stride);
  plan.run(by_plan.args);
  attention(eager.args);
  EXPECT_EQ(by_plan.o.bytes, eager.o.bytes);
  Problem negative(seed, 1, 70);  // (any stride, a negative one too: never read)
  negative.args.q.stride[2] = -5;
  negative.args.o.stride[2] = 0;
  plan.run(negative.args);
  EXPECT_EQ(negative.o.bytes, eager.o.bytes);
  Problem wider(seed, 1, 70);
  wider.args.q.stride[1] += 32;  // a size-4 dimension's stride is the problem's
  test::expect_error([&] { plan.run(wider.args); }, "q: differs from the problem the plan was made for");
}

// A plan moved from holds nothing: using it is a pasa::Error, the moved-to plan runs.
TEST(AttentionPlan, AMovedFromPlanIsAnErrorToUse) {
  Problem p(test::kFixedSeeds[0]);
  AttentionPlan plan(p.args);
  const AttentionPlan moved = std::move(plan);
  test::expect_error([&] { plan.run(p.args); }, "AttentionPlan: a moved-from plan has no problem");
  test::expect_error([&] { (void)plan.workspace_bytes(); }, "a moved-from plan");
  EXPECT_NO_THROW(moved.run(p.args));
}

TEST(AttentionPlan, ACallOfAnotherProblemIsRefusedBeforeWriting) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Problem planned(seed);
  const AttentionPlan plan(planned.args);
  auto expect_refused = [&](Problem& p, const std::string& needle) {
    const auto before = p.o.bytes;
    test::expect_error([&] { plan.run(p.args); }, needle);
    EXPECT_TRUE(before == p.o.bytes) << needle;
  };
  Problem longer(seed, 17, 71);
  expect_refused(longer, "k: differs from the problem the plan was made for");
  Problem not_causal(seed);
  not_causal.args.causal = false;
  expect_refused(not_causal, "causal: differs");
  Problem other_policy(seed);
  other_policy.args.policy = preset_policy("pasa");
  expect_refused(other_policy, "policy: differs");
  Problem no_lse(seed);
  no_lse.args.lse = LseView{};
  expect_refused(no_lse, "lse: differs");
  Problem windowed(seed);
  windowed.args.window_left = 4;
  expect_refused(windowed, "window_left: differs");
  Problem right_window(seed);
  right_window.args.window_right = 0;
  expect_refused(right_window, "window_right: differs");
  Problem capped(seed);
  capped.args.softcap = 30.0;
  expect_refused(capped, "softcap: differs");
  Problem portable(seed);
  portable.args.cuda_path = CudaPath::portable;
  expect_refused(portable, "cuda_path: differs");
  Problem masked(seed);
  const std::vector<std::uint8_t> keep(static_cast<std::size_t>(masked.args.k.shape[2]), 1);
  masked.args.mask.data = keep.data();
  masked.args.mask.kind = MaskKind::boolean;
  masked.args.mask.shape = {1, 1, 1, masked.args.k.shape[2]};
  masked.args.mask.stride = {0, 0, 0, 1};
  expect_refused(masked, "mask: differs");
  Problem unknown_preset(seed);  // (equal fields: policies' equality leaves the preset's name out)
  unknown_preset.args.policy.preset = "flash";
  expect_refused(unknown_preset, "policy: differs");
  Problem nan_input(seed);
  store_from_double(nan_input.v.bytes.data(), DType::f16, 5, NAN);
  expect_refused(nan_input, "v: non-finite value");
}

// run() takes a new mask pointer: its values are checked as pasa::attention checks them (a NaN once
// ran and made its row NaN).
TEST(AttentionPlan, ANewMaskIsScannedForNaN) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Problem p(seed);
  const std::int64_t S_q = p.args.q.shape[2], S_kv = p.args.k.shape[2];
  std::vector<float> zeros(static_cast<std::size_t>(S_q * S_kv), 0.0f), with_nan = zeros;
  with_nan[static_cast<std::size_t>(3 * S_kv + 2)] = NAN;
  p.args.mask = MaskView{zeros.data(), MaskKind::additive, DType::f32, {1, 1, S_q, S_kv}, {0, 0, S_kv, 1}};
  const AttentionPlan plan(p.args);
  p.args.mask.data = with_nan.data();
  const auto before = p.o.bytes;
  test::expect_error([&] { plan.run(p.args); }, "attn_mask: nan at [0, 0, 3, 2]");
  EXPECT_TRUE(before == p.o.bytes);
  p.args.mask.data = nullptr;  // (was reported as a mask of another problem)
  test::expect_error([&] { plan.run(p.args); }, "mask: data pointer is null");
}

TEST(AttentionPlan, PlanningChecksLikeAttention) {
  Problem p(test::fresh_seed());
  p.args.k.shape[1] = 3;
  p.args.v.shape[1] = 3;
  test::expect_error([&] { AttentionPlan plan(p.args); }, "3 K/V heads do not divide the 4 query heads");
  // PASA's shifting matrix M depends on the policy and the scale alone: a singular one is refused
  // when planning, as pasa::attention refuses it, not at the first run.
  Problem singular(test::fresh_seed());
  singular.args.policy = parse_policy("pasa,s2=2,beta=0.99999");
  test::expect_error([&] { attention(singular.args); }, "beta");
  test::expect_error([&] { AttentionPlan plan(singular.args); }, "beta");
  // A scale of 0 folded into M (pasa's scale=k) makes M zero whatever beta and s2 are: the error
  // names the scale, not beta; scale=q takes it.
  Problem zero_scale(test::fresh_seed());
  zero_scale.args.policy = preset_policy("pasa");
  zero_scale.args.scale = 0.0;
  test::expect_error([&] { attention(zero_scale.args); }, "scale: folded into the shifting matrix M");
  zero_scale.args.policy = parse_policy("pasa,scale=q");
  attention(zero_scale.args);
}

}  // namespace
}  // namespace pasa
