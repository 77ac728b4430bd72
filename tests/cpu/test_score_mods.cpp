// SPDX-License-Identifier: Apache-2.0
// Sliding window, logit softcap and attention masks on the CPU backends: the fp64 reference against a
// naive attention written here from the definitions (flash-attn's window_size and softcap, torch
// SDPA's attn_mask), and the emulator against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "pasa/attention.h"
#include "test_util.h"

namespace pasa {
namespace {

using test::Tensor4;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Mods {
  std::int64_t left = -1, right = -1;
  double softcap = 0.0;
  // (b, h, r, c) -> additive value (-inf hides the key); empty: no mask.
  std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> mask;
};

// Attention from the definitions, in double: s = alpha q.k, softcap, + mask, hidden keys dropped.
std::vector<double> naive_attention(const Tensor4& q, const Tensor4& k, const Tensor4& v, bool causal,
                                    CausalAlignment alignment, const Mods& m) {
  const auto& qs = q.view.shape;
  const std::int64_t B = qs[0], H = qs[1], Sq = qs[2], D = qs[3], Hkv = k.view.shape[1], Skv = k.view.shape[2];
  const std::vector<double> qd = test::read_bhsd(q.view), kd = test::read_bhsd(k.view), vd = test::read_bhsd(v.view);
  std::vector<double> out(static_cast<std::size_t>(B * H * Sq * D), 0.0);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t r = 0; r < Sq; ++r) {
        const std::int64_t hk = h / (H / Hkv);
        const std::int64_t diag = alignment == CausalAlignment::bottom_right ? r + Skv - Sq : r;
        std::vector<double> s(static_cast<std::size_t>(Skv), -kInf);
        for (std::int64_t c = 0; c < Skv; ++c) {
          if (causal && c > diag) continue;
          if (m.left >= 0 && c < diag - m.left) continue;
          if (m.right >= 0 && c > diag + m.right) continue;
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) {
            dot += qd[((b * H + h) * Sq + r) * D + d] * kd[((b * Hkv + hk) * Skv + c) * D + d];
          }
          double x = dot / std::sqrt(static_cast<double>(D));
          if (m.softcap > 0) x = m.softcap * std::tanh(x / m.softcap);
          if (m.mask) x += m.mask(b, h, r, c);
          s[c] = x;
        }
        double top = -kInf;
        for (double x : s) top = std::max(top, x);
        if (top == -kInf) continue;  // no visible key: O = 0
        double l = 0;
        for (double& x : s) l += (x = std::exp(x - top));
        for (std::int64_t c = 0; c < Skv; ++c)
          for (std::int64_t d = 0; d < D; ++d) {
            out[((b * H + h) * Sq + r) * D + d] += s[c] / l * vd[((b * Hkv + hk) * Skv + c) * D + d];
          }
      }
  return out;
}

struct Problem {
  Tensor4 q, k, v, o;
  std::vector<float> mask;  // additive values or 0/1 bytes, [mb, mh, Sq, Skv]
  std::vector<std::uint8_t> mask_bytes;
  AttentionArgs args;
};

Problem make_problem(std::mt19937_64& rng, std::int64_t B, std::int64_t H, std::int64_t Hkv, std::int64_t Sq,
                     std::int64_t Skv, std::int64_t D) {
  Problem p;
  p.q = test::random_tensor(B, H, Sq, D, rng, DType::f32, false, -2.0, 2.0);
  p.k = test::random_tensor(B, Hkv, Skv, D, rng, DType::f32, false, -2.0, 2.0);
  p.v = test::random_tensor(B, Hkv, Skv, D, rng);
  p.o = test::make_tensor(B, H, Sq, D, DType::f32);
  test::poison(p.o);
  return p;
}

void bind(Problem& p) {
  p.args.q = p.q.view;
  p.args.k = p.k.view;
  p.args.v = p.v.view;
  p.args.o = p.o.view;
}

// An additive mask [mb, mh, Sq, Skv] of values in [-3, 3] with about a fifth -inf, or a boolean one
// with about a fifth false; broadcast over the axes of size 1.
void add_mask(Problem& p, std::mt19937_64& rng, std::int64_t mb, std::int64_t mh, bool boolean, Mods& m) {
  const std::int64_t Sq = p.q.view.shape[2], Skv = p.k.view.shape[2];
  const std::size_t n = static_cast<std::size_t>(mb * mh * Sq * Skv);
  std::uniform_real_distribution<double> value(-3.0, 3.0);
  std::bernoulli_distribution hidden(0.2);
  p.mask.assign(n, 0.0f);
  p.mask_bytes.assign(n, 1);
  for (std::size_t i = 0; i < n; ++i) {
    const bool hide = hidden(rng);
    p.mask_bytes[i] = hide ? 0 : 1;
    p.mask[i] = hide ? -std::numeric_limits<float>::infinity() : (boolean ? 0.0f : static_cast<float>(value(rng)));
  }
  MaskView& view = p.args.mask;
  view.kind = boolean ? MaskKind::boolean : MaskKind::additive;
  view.data = boolean ? static_cast<const void*>(p.mask_bytes.data()) : static_cast<const void*>(p.mask.data());
  view.dtype = DType::f32;
  view.shape = {mb, mh, Sq, Skv};
  view.stride = {mh * Sq * Skv, Sq * Skv, Skv, 1};
  const std::vector<float> values = p.mask;
  m.mask = [values, mb, mh, Sq, Skv](std::int64_t b, std::int64_t h, std::int64_t r, std::int64_t c) {
    return static_cast<double>(values[(((mb == 1 ? 0 : b) * mh + (mh == 1 ? 0 : h)) * Sq + r) * Skv + c]);
  };
}

struct Case {
  std::int64_t B, H, Hkv, Sq, Skv, D;
  bool causal;
  CausalAlignment alignment;
  Mods mods;
  int mask;  // 0: none, 1: additive [1, H, Sq, Skv], 2: boolean [B, 1, Sq, Skv]
};

TEST(ScoreMods, ReferenceAndEmulatorFollowTheDefinitions) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const Case cases[] = {
      {1, 2, 1, 37, 37, 64, false, br, {5, 3}, 0},         // window both sides
      {2, 2, 2, 17, 70, 64, true, br, {8, -1}, 0},         // causal + window, S_q < S_kv (decode-like)
      {1, 2, 2, 70, 17, 32, true, tl, {4, 0}, 0},          // top-left, S_q > S_kv: rows with no key
      {1, 2, 1, 1, 300, 64, false, br, {20, 0}, 0},        // one query, window of 21 keys
      {1, 2, 2, 33, 33, 64, true, tl, {-1, -1, 1.5}, 0},   // softcap (small: it bites)
      {2, 4, 2, 19, 45, 64, false, br, {-1, -1, 0.0}, 1},  // additive mask, broadcast over B
      {2, 2, 1, 21, 21, 64, true, br, {6, -1, 2.0}, 2},    // all three, boolean mask over H
  };
  for (const Case& c : cases) {
    const auto seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " Sq " << c.Sq << " Skv " << c.Skv << " window ("
                                      << c.mods.left << ", " << c.mods.right << ") softcap " << c.mods.softcap
                                      << " mask " << c.mask);
    std::mt19937_64 rng(seed);
    Problem p = make_problem(rng, c.B, c.H, c.Hkv, c.Sq, c.Skv, c.D);
    Mods mods = c.mods;
    if (c.mask == 1) add_mask(p, rng, 1, c.H, false, mods);
    if (c.mask == 2) add_mask(p, rng, c.B, 1, true, mods);
    bind(p);
    p.args.causal = c.causal;
    p.args.alignment = c.alignment;
    p.args.window_left = mods.left;
    p.args.window_right = mods.right;
    p.args.softcap = mods.softcap;
    p.args.policy.block_q = 16;
    p.args.policy.block_kv = 16;
    const std::vector<double> want = naive_attention(p.q, p.k, p.v, c.causal, c.alignment, mods);
    const ReferenceResult ref = reference_attention(p.args);
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(ref.o[i], want[i], 1e-12) << i;
    attention(p.args);  // exact policy: fp32 throughout
    const std::vector<double> got = test::read_bhsd(p.o.view);
    // fp32 rounding over D-term dot products and S_kv-term sums: a few units of 2^-24 per term.
    const double tol = 64 * std::ldexp(1.0, -24) * std::sqrt(static_cast<double>(c.D + c.Skv));
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << i;
    // Each mechanism changes the result on this input: the test would fail if it were ignored.
    Mods none;
    const std::vector<double> plain = naive_attention(p.q, p.k, p.v, c.causal, c.alignment, none);
    EXPECT_GT(test::relative_rmse(plain, want), 100 * tol);
  }
}

// A window as wide as int64 allows hides nothing: diagonal + 2^63 - 1 once overflowed and hid every key
// of the rows right of key 0 (O = 0), and diagonal - (2^63 - 1) those left of it (S_q > S_kv).
TEST(ScoreMods, AWindowOfTheLargestSizeHidesNothing) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  Problem p = make_problem(rng, 1, 2, 1, 9, 5, 16);
  bind(p);
  const ReferenceResult plain = reference_attention(p.args);
  attention(p.args);
  const std::vector<double> plain_o = test::read_bhsd(p.o.view);
  constexpr std::int64_t kWidest = std::numeric_limits<std::int64_t>::max();
  for (const auto& [left, right] : {std::pair{kWidest, std::int64_t{-1}}, {std::int64_t{-1}, kWidest}, {kWidest, kWidest}}) {
    SCOPED_TRACE(::testing::Message() << "window (" << left << ", " << right << ")");
    p.args.window_left = left;
    p.args.window_right = right;
    EXPECT_EQ(reference_attention(p.args).o, plain.o);
    test::poison(p.o);
    attention(p.args);
    EXPECT_EQ(test::read_bhsd(p.o.view), plain_o);
  }
}

TEST(ScoreMods, LowPrecisionPoliciesStayCloseUnderMasksAndWindows) {
  // fa16, pasa, fdpp (fp16 operands) and sage8: relative RMSE against the masked fp64 reference within
  // a small multiple of their formats' unit roundoff; the window and mask move the result by far more.
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  for (const char* policy : {"fa16", "pasa", "sage8", "fdpp"}) {
    Problem p = make_problem(rng, 1, 2, 1, 200, 260, 64);
    Mods mods{40, -1};
    add_mask(p, rng, 1, 1, false, mods);
    bind(p);
    p.args.causal = true;
    p.args.window_left = mods.left;
    p.args.policy = parse_policy(policy);
    attention(p.args);
    const ReferenceResult ref = reference_attention(p.args);
    const double err = test::relative_rmse(test::read_bhsd(p.o.view), ref.o);
    // fp16 policies: 16 units of fp16's roundoff; sage8: one unit of e4m3's (FP8 P and V).
    const double bound = std::string(policy) == "sage8" ? std::ldexp(1.0, -4) : 16 * std::ldexp(1.0, -11);
    EXPECT_LT(err, bound) << policy;
    p.args.window_left = -1;
    p.args.mask = MaskView{};
    const ReferenceResult unmasked = reference_attention(p.args);
    EXPECT_GT(test::relative_rmse(unmasked.o, ref.o), 4 * bound) << policy;
  }
}

TEST(ScoreMods, SoftcapSeesTheScoresSmoothKTookItsMeanFrom) {
  // Smooth K subtracts mean(K) from every key, which takes alpha q . mean(K) out of each score of a
  // row: harmless to the softmax, but tanh is not shift-invariant, so the softcap has to see the
  // scores with that constant back. K with a common offset (U(19.5, 20.5) Q and K: the constant is
  // about 3200 and the capped scores all near +30) makes the difference total; the exact policy with
  // smooth K differs from plain exact only by fp32 rounding, sage8 by its INT8/FP8 quantization.
  std::mt19937_64 rng(2024);
  Problem p = make_problem(rng, 1, 2, 2, 150, 150, 64);
  p.q = test::random_tensor(1, 2, 150, 64, rng, DType::f32, false, 19.5, 20.5);
  p.k = test::random_tensor(1, 2, 150, 64, rng, DType::f32, false, 19.5, 20.5);
  Mods mods{-1, -1, 30.0};
  bind(p);
  std::vector<float> lse(2 * 150);
  p.args.lse = lse_view(lse.data(), 1, 2, 150);
  p.args.causal = true;
  p.args.softcap = mods.softcap;
  const std::vector<double> want = naive_attention(p.q, p.k, p.v, true, CausalAlignment::bottom_right, mods);
  const ReferenceResult ref = reference_attention(p.args);
  for (const char* policy : {"exact,smooth_k=true", "sage8", "sage4,q_gran=token,k_gran=token"}) {
    SCOPED_TRACE(policy);
    p.args.policy = parse_policy(policy);
    attention(p.args);
    const double err = test::relative_rmse(test::read_bhsd(p.o.view), want);
    // exact: fp32 rounding; sage8/sage4: one unit of e4m3's roundoff (FP8 P and V; the capped scores
    // span less than one unit of INT4's grid here, so the 4-bit Q and K cost nothing more).
    EXPECT_LT(err, std::string(policy).rfind("exact", 0) == 0 ? 1e-5 : std::ldexp(1.0, -4));
    double lse_err = 0.0;
    for (std::size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, std::fabs(lse[i] - ref.lse[i]));
    EXPECT_LT(lse_err, 1e-3);  // the capped LSE is below 30 + log(150)
  }
}

// p's call with an fp32 additive mask [1, 1, Sq, Skv], one row of values per query row.
void bind_float_mask(Problem& p, const std::vector<float>& mask) {
  const std::int64_t Sq = p.q.view.shape[2], Skv = p.k.view.shape[2];
  bind(p);
  p.args.mask = MaskView{mask.data(), MaskKind::additive, DType::f32, {1, 1, Sq, Skv}, {0, 0, Skv, 1}};
}

TEST(ScoreMods, PaddingMasksOfTheFormatsMinimumKeepRowsFinite) {
  // Frameworks pad with finite masks of finfo(dtype).min. Under an fp16 softmax (fa16, pasa; and
  // fp32's minimum in base 2 under exp_base=2) the score plus such a value left the format's range:
  // -inf, and a key block masked whole made its row NaN although the row's first keys are visible.
  // Saturated to the format's largest value, those keys get weight 0: rows 4..7 (keys >= 100
  // masked) match the masked reference as closely as the policy's rounding allows, and rows 0..3
  // (every key masked) stay finite (their value is the masked scores' average, as in fp32).
  std::mt19937_64 rng(2024);
  const std::int64_t Sq = 8, Skv = 200, D = 64;
  for (const double fill : {-3.4028234663852886e38, -65504.0}) {
    for (const char* policy : {"pasa", "fa16", "exact,exp_base=2"}) {
      SCOPED_TRACE(::testing::Message() << policy << " mask " << fill);
      Problem p = make_problem(rng, 1, 1, 1, Sq, Skv, D);
      std::vector<float> mask(static_cast<std::size_t>(Sq * Skv), 0.0f);
      for (std::int64_t r = 0; r < Sq; ++r)
        for (std::int64_t c = 0; c < Skv; ++c)
          if (r < 4 || c >= 100) mask[static_cast<std::size_t>(r * Skv + c)] = static_cast<float>(fill);
      bind_float_mask(p, mask);
      p.args.policy = parse_policy(policy);
      attention(p.args);
      const ReferenceResult ref = reference_attention(p.args);
      const std::vector<double> got = test::read_bhsd(p.o.view);
      for (std::int64_t i = 0; i < Sq * D; ++i) ASSERT_TRUE(std::isfinite(got[i])) << "row " << i / D;
      const std::vector<double> kept(got.begin() + 4 * D, got.end()), want(ref.o.begin() + 4 * D, ref.o.end());
      EXPECT_LT(test::relative_rmse(kept, want), 16 * std::ldexp(1.0, -11));
      if (fill == -65504.0) continue;  // (in fp64 the scores still order those keys)
      // Rows 0..3: every key at finfo.min, which the reference's scores do not pass: V's average.
      const std::vector<double> masked(got.begin(), got.begin() + 4 * D), uniform(ref.o.begin(), ref.o.begin() + 4 * D);
      EXPECT_LT(test::relative_rmse(masked, uniform), 16 * std::ldexp(1.0, -11));
    }
  }
}

// p's call under each PASA preset; `check` gets each one's O (as read_bhsd reads it).
template <typename F>
void for_each_pasa_preset(Problem& p, F check) {
  for (const char* policy : {"pasa", "pasa_fp16acc", "pasa_accurate"}) {
    SCOPED_TRACE(policy);
    p.args.policy = parse_policy(policy);
    attention(p.args);
    check(test::read_bhsd(p.o.view));
  }
}

TEST(ScoreMods, AKeyBlockPaddedWithTheFormatsMinimumStaysBelowTheVisibleKeys) {
  // A whole key block of padding in the float convention (0 visible, finfo.min padded) whose keys score
  // high. PASA's S' of those keys saturate at -65504; the block's recovered maximum m' + G s' added
  // its pseudo-average back, which counts those keys, and put the padding above the visible keys:
  // every row took the padding's V (relative RMSE 47, LSE off by 4500).
  std::mt19937_64 rng(test::kFixedSeeds[2]);
  const std::int64_t Sq = 8, Skv = 256, visible = 128, D = 64;
  Problem p = make_problem(rng, 1, 1, 1, Sq, Skv, D);
  for (std::int64_t i = 0; i < Sq * D; ++i) {  // (queries of mean 1: the padding's scores near 6000 x 64)
    store_from_double(p.q.bytes.data(), DType::f32, i, 1.0 + 0.5 * load_as_float(p.q.bytes.data(), DType::f32, i));
  }
  for (std::int64_t c = visible; c < Skv; ++c)  // (one key of 0 among them: its S' overflows to -inf)
    for (std::int64_t d = 0; d < D; ++d) {
      store_from_double(p.k.bytes.data(), DType::f32, c * D + d, c == visible ? 0.0 : 6000.0);
      store_from_double(p.v.bytes.data(), DType::f32, c * D + d, 5.0);
    }
  std::vector<float> mask(static_cast<std::size_t>(Sq * Skv), 0.0f);
  for (std::int64_t r = 0; r < Sq; ++r)
    for (std::int64_t c = visible; c < Skv; ++c) mask[static_cast<std::size_t>(r * Skv + c)] = -3.4028234663852886e38f;
  bind_float_mask(p, mask);
  std::vector<float> lse(static_cast<std::size_t>(Sq));
  p.args.lse = lse_view(lse.data(), 1, 1, Sq);
  const ReferenceResult ref = reference_attention(p.args);
  for_each_pasa_preset(p, [&](const std::vector<double>& o) {
    EXPECT_LT(test::relative_rmse(o, ref.o), 5e-3);
    for (std::int64_t r = 0; r < Sq; ++r) EXPECT_NEAR(lse[r], ref.lse[r], 0.05) << "row " << r;
  });
}

TEST(ScoreMods, LongPaddingOfTheFormatsMinimumKeepsLAndOInRange) {
  // Left padding of finfo.min before a row's visible keys, and a row padded whole: the padded blocks
  // sit at the state's lowest reference, where fp32 cannot move it, and their keys (each P = 1) grew
  // l and O~ past fp16: NaN once the visible keys' factor 0 met O~ = inf, inf for the padded row. The
  // headroom's moves there are kept apart, so that every padded block weighs alike (V varies, so a
  // block weighed wrong shows).
  std::mt19937_64 rng(test::kFixedSeeds[3]);
  const std::int64_t Sq = 2, Skv = 9000, visible = 100, D = 64;
  Problem p = make_problem(rng, 1, 1, 1, Sq, Skv, D);
  for (std::int64_t i = 0; i < Skv * D; ++i) {  // V of mean 20: O~ passes 65504 after about 3300 keys
    store_from_double(p.v.bytes.data(), DType::f32, i, 20.0 + 20.0 * load_as_float(p.v.bytes.data(), DType::f32, i));
  }
  std::vector<float> mask(static_cast<std::size_t>(Sq * Skv), -3.4028234663852886e38f);
  for (std::int64_t c = Skv - visible; c < Skv; ++c) mask[static_cast<std::size_t>(c)] = 0.0f;  // row 0's tail
  bind_float_mask(p, mask);
  const ReferenceResult ref = reference_attention(p.args);  // row 0: its tail; row 1: V's average
  for_each_pasa_preset(p, [&](const std::vector<double>& o) {
    for (std::int64_t r = 0; r < Sq; ++r) {
      const std::vector<double> row(o.begin() + r * D, o.begin() + (r + 1) * D);
      const std::vector<double> want(ref.o.begin() + r * D, ref.o.begin() + (r + 1) * D);
      EXPECT_LT(test::relative_rmse(row, want), 4e-3) << "row " << r;
    }
  });
  // A row padded whole over V ~ N(0, 1), where a block weighed wrong moves the average most.
  Problem all = make_problem(rng, 1, 1, 1, 1, 4096, D);
  const std::vector<float> all_mask(4096, -3.4028234663852886e38f);
  bind_float_mask(all, all_mask);
  const ReferenceResult average = reference_attention(all.args);
  for_each_pasa_preset(all, [&](const std::vector<double>& o) { EXPECT_LT(test::relative_rmse(o, average.o), 4e-3); });
}

TEST(ScoreMods, PaddingOfTheFormatsMinimumOverLargeValues) {
  // Rows of finfo.min padding over V of 1000 to 60000, where the O~ rule (numerics/pasa_headroom.h)
  // moves the reference: at the floor, where the reference cannot move, the moves are kept apart, and
  // each padded block's maximum is below the floor plus them (taken at the floor itself, each block
  // moved the row by the whole rule again, its factor fell to 0 and O = 0 / 0). Q = K = 0, so every
  // key weighs alike: O is V's average. Also a padded prefix before visible keys, whole and in splits
  // (a split of padding alone ended with l = 0 there, and the merge gave NaN). Algorithm 1's fp16
  // reference (reference=average) sits at the same floor, fp16's lowest value, where its step of 32
  // rounded every move away: inf or NaN in all five cases until it kept its moves apart too.
  struct Padded {
    std::int64_t keys, visible;
    float v;
    const char* policy_suffix;
  };
  for (const Padded& c : {Padded{1024, 0, 60000.0f, ""}, Padded{768, 0, 60000.0f, ""}, Padded{2560, 0, 1000.0f, ""},
                          Padded{5000, 1000, 1000.0f, ",splits=2"}, Padded{5000, 1000, 1000.0f, ",splits=3"}}) {
    SCOPED_TRACE(::testing::Message() << c.keys << " keys, " << c.visible << " visible, v " << c.v << c.policy_suffix);
    std::mt19937_64 rng(test::kFixedSeeds[4]);
    Problem p = make_problem(rng, 1, 1, 1, 1, c.keys, 64);
    for (std::int64_t i = 0; i < c.keys * 64; ++i) {
      store_from_double(p.q.bytes.data(), DType::f32, i % 64, 0.0);
      store_from_double(p.k.bytes.data(), DType::f32, i, 0.0);
      store_from_double(p.v.bytes.data(), DType::f32, i, c.v);
    }
    std::vector<float> mask(static_cast<std::size_t>(c.keys), -3.4028234663852886e38f);
    for (std::int64_t k = c.keys - c.visible; k < c.keys; ++k) mask[static_cast<std::size_t>(k)] = 0.0f;
    bind_float_mask(p, mask);
    for (const char* preset :
         {"pasa", "pasa_fp16acc", "pasa_accurate", "pasa,reference=average", "pasa_accurate,reference=average"}) {
      SCOPED_TRACE(preset);
      p.args.policy = parse_policy(std::string(preset) + c.policy_suffix);
      attention(p.args);
      for (const double o : test::read_bhsd(p.o.view)) ASSERT_NEAR(o, c.v, 5e-3 * c.v);
    }
  }
}

TEST(ScoreMods, SplitsOfARowPaddedWholeWeighTheirKeys) {
  // A row padded whole with finfo.min under splits: each split's LSE is about -3.4e38, where fp64
  // cannot hold the log of its number of keys, and the merge by LSE weighed the splits alike. V is
  // +950 on the last 250 of 500 keys and -950 on the first 250, so weighing splits of 256 and 244 keys
  // alike moves O by 22 from exact attention's 0 (every key alike). The merge now weighs each split
  // by its l beside its reference (and, under PASA, its moves kept apart at the floor).
  std::mt19937_64 rng(test::kFixedSeeds[2]);
  const std::int64_t Sq = 4, Skv = 500, D = 64;
  Problem p = make_problem(rng, 1, 1, 1, Sq, Skv, D);
  for (std::int64_t i = 0; i < Skv * D; ++i) {
    store_from_double(p.v.bytes.data(), DType::f32, i, i / D < 250 ? -950.0 : 950.0);
  }
  const std::vector<float> mask(static_cast<std::size_t>(Sq * Skv), -3.4028234663852886e38f);
  bind_float_mask(p, mask);
  for (const char* policy : {"exact,splits=2", "exact,splits=3", "fa16_fp32,splits=2", "pasa,splits=2",
                             "pasa_fp16acc,splits=3", "pasa_accurate,splits=2"}) {
    SCOPED_TRACE(policy);
    p.args.policy = parse_policy(policy);
    attention(p.args);
    for (const double o : test::read_bhsd(p.o.view)) ASSERT_NEAR(o, 0.0, 2.0);  // (fp16 O~ sums of +-950)
  }
}

// Garbage where a boolean or -inf mask hides keys from every row (a padded batch's padding) leaves the
// quantized and shifted policies as accurate as on the visible keys alone: their statistics (smooth K,
// the quantizers' scales, PASA's block pseudo-averages) leave those keys out. Before, values of 1000
// there cost sage8 a relative error of order 1 and pasa of order 0.1.
TEST(ScoreMods, GarbageInKeysEveryRowsMaskHidesCostsNothing) {
  const std::int64_t B = 1, H = 2, Sq = 40, Skv = 300, visible = 170, D = 64;
  std::mt19937_64 rng(test::kFixedSeeds[1]);
  Problem p = make_problem(rng, B, H, H, Sq, Skv, D);
  Tensor4 k_visible = test::make_tensor(B, H, visible, D, DType::f32);
  Tensor4 v_visible = test::make_tensor(B, H, visible, D, DType::f32);
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t c = 0; c < Skv; ++c)
      for (std::int64_t d = 0; d < D; ++d) {
        const std::int64_t i = (h * Skv + c) * D + d, j = (h * visible + c) * D + d;
        if (c >= visible) {  // padding: large, of both signs
          store_from_double(p.k.bytes.data(), DType::f32, i, (d % 2 ? 1000.0 : -700.0) + c);
          store_from_double(p.v.bytes.data(), DType::f32, i, 1000.0 * ((c + d) % 3 - 1));
        } else {
          store_from_double(k_visible.bytes.data(), DType::f32, j, load_as_float(p.k.bytes.data(), DType::f32, i));
          store_from_double(v_visible.bytes.data(), DType::f32, j, load_as_float(p.v.bytes.data(), DType::f32, i));
        }
      }
  p.mask_bytes.assign(static_cast<std::size_t>(Sq * Skv), 1);
  for (std::int64_t r = 0; r < Sq; ++r)
    for (std::int64_t c = visible; c < Skv; ++c) p.mask_bytes[static_cast<std::size_t>(r * Skv + c)] = 0;
  bind(p);
  p.args.mask = MaskView{p.mask_bytes.data(), MaskKind::boolean, DType::f32, {1, 1, Sq, Skv}, {Sq * Skv, Sq * Skv, Skv, 1}};
  const std::vector<double> ref = naive_attention(p.q, k_visible, v_visible, false, CausalAlignment::bottom_right, {});
  for (const char* policy : {"sage8", "sage4", "pasa", "pasa_accurate"}) {
    SCOPED_TRACE(policy);
    p.args.policy = parse_policy(policy);
    attention(p.args);
    const double padded = test::relative_rmse(test::read_bhsd(p.o.view), ref);
    Tensor4 o = test::make_tensor(B, H, Sq, D, DType::f32);
    AttentionArgs alone = p.args;
    alone.k = k_visible.view;
    alone.v = v_visible.view;
    alone.o = o.view;
    alone.mask = MaskView{};
    attention(alone);
    const double without = test::relative_rmse(test::read_bhsd(o.view), ref);
    EXPECT_LE(padded, 1.5 * without + 1e-4) << "padded " << padded << ", visible keys alone " << without;
  }
}

TEST(ScoreMods, BadArgumentsNameTheArgument) {
  std::mt19937_64 rng(7);
  Problem p = make_problem(rng, 1, 2, 2, 8, 8, 64);
  bind(p);
  AttentionArgs a = p.args;
  a.window_left = -2;
  test::expect_error([&] { attention(a); }, "window_size: (-2, -1)");
  a = p.args;
  a.softcap = -1;
  test::expect_error([&] { attention(a); }, "softcap: -1 must be finite");
  a = p.args;
  a.softcap = 30;
  a.policy = parse_policy("pasa");
  test::expect_error([&] { attention(a); }, "softcap: PASA's shifted scores");
  Mods m;
  add_mask(p, rng, 1, 3, false, m);
  a = p.args;
  a.mask = p.args.mask;
  test::expect_error([&] { attention(a); }, "attn_mask: shape [1, 3, 8, 8] does not broadcast");
  add_mask(p, rng, 1, 1, false, m);
  p.mask[5] = std::numeric_limits<float>::infinity();
  a.mask = p.args.mask;
  test::expect_error([&] { attention(a); }, "attn_mask: inf at [0, 0, 0, 5]");
  p.mask[5] = 0.0f;
  a.mask = p.args.mask;
  a.mask.dtype = static_cast<DType>(-1);  // (was read as all zeros: the mask silently ignored)
  test::expect_error([&] { attention(a); }, "attn_mask: an additive mask must be f32, f16 or bf16");
  a.mask = p.args.mask;
  a.mask.stride[2] = std::int64_t{1} << 61;  // offsets past 2^63 bytes (was a crash)
  test::expect_error([&] { attention(a); }, "attn_mask: sizes [1, 1, 8, 8] with strides");
  // A softcap past the format the scores are capped in: s / softcap was 0 there, every score with it
  // (a uniform average where the reference is not).
  a = p.args;
  a.softcap = 1e39;
  test::expect_error([&] { attention(a); }, "softcap: 1e+39 is above 3.40282e+38, the range of fp32");
  a.softcap = 1e5;
  a.policy = parse_policy("fa16");
  test::expect_error([&] { attention(a); }, "softcap: 100000 is above 65504");
  a = p.args;
  a.q.stride[1] = (std::int64_t{1} << 61) + (std::int64_t{1} << 40);  // (was a crash)
  test::expect_error([&] { attention(a); }, "q: sizes [1, 2, 8, 64] with strides");
}

}  // namespace
}  // namespace pasa
