// SPDX-License-Identifier: Apache-2.0
// The policy emulator: one online-softmax loop that rounds where the policy says.
//
// For each query block i and key block j (algorithms.md sections 1, 3, 4, 5; the paper's Algorithm 1):
//   S' = fl_s(Q_i K'_j^T * dq * dk + dS)     K' = K, alpha K or M K; dq, dk quantizer scales (else 1)
//   x  = fl_sm(S' * alpha) or fl_sm(S')       scores in the softmax format
//   m' = rowmax(x) (phi for the unified max), e = exp(x - m'), l' = rowsum(e)
//   shift terms dm'_prev, dm'_cur (zero without PASA): the candidates a = fl(m + dm'_prev) and
//   b = fl(m' + dm'_cur), m_new = max(a, b), the rescale factors e_prev = e^fl(a - m_new) and
//   e_cur = e^fl(b - m_new) (each <= 1: the factors are taken from the maxima as stored, so no
//   rounding of m can make O~ or l grow from block to block); PASA moves m_new up by a power of two
//   once l is large (numerics/pasa_headroom.h)
//   l = e_prev l + e_cur l',  O~ = e_prev O~ + e_cur fl_o(fl_p(e * p_scale) V_j)   (two-level)
// pv_blocks > 1 keeps P V in pv_acc over that many blocks (P against the running maximum, pv_acc rescaled
// with O~) before it goes into O~; two_level=0 keeps it there for the whole key range.
// Row sums (l', PASA's block sum of S') accumulate in sum_acc and are rounded once to the softmax
// format; rowsum=p takes l' = fl_sm(sum fl_p(e * p_scale)) / p_scale instead, accumulated in pv_acc.
// docs/algorithms.md states PASA's state update and where this departs from Algorithm 1.
// With shift=none the shift terms are exactly zero and this is FlashAttention-2 written with the
// block-local maximum, so PASA with beta = 0 is the same computation bit for bit (tested).
// Every arithmetic result is rounded by the format of the point it belongs to ("sm" = softmax).
// The key axis may be cut into `splits` parts whose partial results are merged exactly at the end.
// With exp_base=2 "alpha" below is the scale in base-2 units (alpha log2(e), score_unit) and every
// exponential is 2^x; the LSE leaves in natural units.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/backends.h"
#include "cpu/gemm_model.h"
#include "cpu/host_inputs.h"
#include "cpu/operands.h"
#include "cpu/parallel_for.h"
#include "cpu/score_mods.h"
#include "interrupt.h"
#include "numerics/pasa_headroom.h"
#include "numerics/pasa_shift.h"
#include "pasa/format.h"
#include "storage_convert.h"

namespace pasa {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Running state of one query row over one key range.
struct RowState {
  double m = kNegInf;          // running max, relative to the reference g * F (phi when unified)
  double l = 0.0;              // running sum of exponentials
  double F = 0.0;              // PASA's global pseudo-average (Eq. 15)
  int blocks = 0;              // key blocks with a visible key so far
  int averaged = 0;            // of those, the blocks F averages (the j - 1 of Eq. 15; see below)
  bool left_window = false;    // unified max: some x - phi left (window_lo, window_hi)
  bool overflowed = false;     // a block whose visible scores all overflowed to -inf (it added nothing)
  double floor_moves = 0.0;    // PASA at the state format's floor (mask-saturated blocks): the headroom's
                               // moves there, which the floor cannot hold (the reference is the floor + this)
  float w = 0.0f;              // PASA: the bound on |O~| of the headroom's O~ rule (pasa_output_bound)
};

// The result of one query block over one key range: per-row state and the unnormalised O~.
struct Partial {
  std::vector<RowState> state;
  std::vector<double> acc;  // [rows][D]
};

struct Task {
  std::int64_t b, h, r0, r1;
};

// e^x or 2^x, as the policy's exp_base says, in fp64 (rounded by the caller).
double power(const Policy& pol, double x) { return pol.exp_base == ExpBase::two ? std::exp2(x) : std::exp(x); }

// A row's LSE in natural units from its state: m + g F in the scores' units, l a sum of powers.
double row_lse(const Policy& pol, double m, double l, double g, double F) {
  return (m + g * F) / score_unit(pol) + std::log(l);
}

// PASA's invariance G for the stored M (numerics/pasa_shift.h), held in fp32 as a constant of the
// call (a kernel parameter); each product with it is rounded to the softmax format.
double pasa_invariance(const Policy& pol, double alpha) {
  if (pol.shift != Shift::pasa) return 0.0;
  const double factor = pol.scale == ScalePlacement::key ? alpha : 1.0;
  return static_cast<float>(pasa_shift(pol.beta, pol.block_kv, factor, pol.input).invariance);
}

Partial run_key_range(const AttentionArgs& args, const Policy& pol, const ProblemShape& ps, const Task& t,
                      std::int64_t k_begin, std::int64_t k_end, const PreparedQ& pq,
                      const PreparedKV& kv, double alpha, const Rounders& R) {
  const int D = static_cast<int>(ps.dim);
  const int s2 = pol.block_kv;
  const int rows = static_cast<int>(t.r1 - t.r0);
  const bool pasa = pol.shift == Shift::pasa;
  const bool pasa_average = pasa && pol.reference == PasaReference::average;
  const bool pasa_max = pasa && !pasa_average;
  const bool unified = pol.shift == Shift::unified;
  const auto& sm = R.sm;
  const double alpha_sm = sm(alpha);
  // The reference and its moves: in the softmax format, but PASA's relative to the maximum in fp32
  // (reference=max). Relative to the average, PASA moves it by G times a difference of
  // pseudo-averages, which passes the format's range where key blocks' means differ by more than its
  // largest value over G (about 1000 in fp16): PASA's state format saturates, so the state stays
  // finite (and far blocks keep the candidates within it: below).
  const Format state_format =
      pasa_average ? saturating(pol.softmax) : pasa ? saturating(Format::fp32()) : pol.softmax;
  const auto state_round = [&](double x) { return round_to(state_format, x); };
  const auto state_top = static_cast<float>(state_format.max_finite());
  const double sm_top = sm.format().max_finite();
  // A score (or a mean of scores) times the scale where the policy applies it to the scores (scale=q
  // and scale=k applied it before the GEMM); `scaled` rounds it to the softmax format.
  const auto with_scale = [&](double v) { return pol.scale == ScalePlacement::scores ? v * alpha_sm : v; };
  const auto scaled = [&](double v) { return sm(with_scale(v)); };
  const double g = pasa_invariance(pol, alpha);
  const auto gf = static_cast<float>(g);
  // A pseudo-average (of scaled scores) at its rounding point: the softmax format relative to the
  // average, fp32 relative to the maximum.
  const auto round_average = [&](double v) { return pasa_average ? sm(v) : state_round(v); };
  const double phi = sm(pol.phi);
  const double unit = score_unit(pol);  // an additive mask's natural units into the scores'
  // The accumulator O~ lives in the O format (two-level) or in the PV accumulator itself.
  const Rounder& acc_round = pol.two_level ? R.o : R.pv_acc;
  const float* q = &pq.q[static_cast<std::size_t>(t.r0 * D)];

  Partial out{std::vector<RowState>(rows), std::vector<double>(static_cast<std::size_t>(rows) * D, 0.0)};
  std::vector<double> scores(static_cast<std::size_t>(rows) * s2);
  std::vector<float> p_op(static_cast<std::size_t>(rows) * s2);  // P as the GEMM operand
  const std::vector<float> ones(pol.rowsum == RowSum::p ? static_cast<std::size_t>(s2) : 0, 1.0f);  // rowsum=p
  std::vector<double> pv(static_cast<std::size_t>(rows) * D);
  std::vector<float> v_shifted;  // PASA: a block of large V at 2^-shift times its value (below)
  // pv_blocks > 1: the P V of the blocks since pv_acc last went into O (rescaled with O).
  std::vector<double> pending(pol.two_level && pol.pv_blocks > 1 ? static_cast<std::size_t>(rows) * D : 0, 0.0);
  std::vector<double> e_prev(rows), e_cur(rows);
  std::vector<double> pasa_means(rows);  // pseudo_avg=k: each row's s' of the block
  std::vector<char> active(rows);

  // Key blocks past the last key any row of this block may see are skipped whole.
  std::int64_t key_end = k_end;
  if (args.causal) {
    const std::int64_t last = args.alignment == CausalAlignment::bottom_right
                                  ? (t.r1 - 1) + ps.seq_kv - ps.seq_q
                                  : t.r1 - 1;
    key_end = std::clamp<std::int64_t>(last + 1, k_begin, k_end);
  }
  const ScoreMods mods(args, ps);  // causal, sliding window, mask, softcap (src/cpu/score_mods.h)
  auto visible = [&](int rr, std::int64_t key) { return mods.visible(t.b, t.h, t.r0 + rr, key); };

  for (std::int64_t k0 = k_begin; k0 < key_end; k0 += s2) {
    poll_interrupt();  // (a decode row of millions of keys is one task)
    const int n = static_cast<int>(std::min<std::int64_t>(s2, k_end - k0));
    // PASA's blocks are all s2 keys wide (a short last block padded, operands.cpp): the padded keys'
    // S' enter the block's pseudo-average, and are masked out of the softmax below.
    const int cols = pasa ? s2 : n;
    model_gemm(q, D, &kv.kt[static_cast<std::size_t>(k0 * D)], cols, rows, D, cols, R.qk_acc, pol.mma_k,
               R.qk_acc, scores.data(), cols);
    if (pasa && pol.pseudo_avg == PseudoAverage::keys) {
      // s' = Q (r mean K_j): one more column of the same GEMM, scaled like the scores.
      model_gemm(q, D, &kv.shift_mean[static_cast<std::size_t>(k0 / s2 * D)], 1, rows, D, 1, R.qk_acc,
                 pol.mma_k, R.qk_acc, pasa_means.data(), 1);
      for (double& m : pasa_means) m = round_average(with_scale(pasa_average ? R.s(m) : m));
    }

    // PASA: the block's largest |V| (its keys, every channel), for the headroom and P V's shift
    // (numerics/pasa_headroom.h), times P's scale, which O~ carries too. (Split boundaries fall on key
    // blocks.)
    const float v_block =
        pasa ? kv.v_block_max[static_cast<std::size_t>(k0 / s2)] * static_cast<float>(pol.p_scale) : 0.0f;
    // P against the running maximum (p_max=running, or one accumulator): the block's factor e_cur
    // goes into P itself, whose headroom bounds its P V. Else a block of large V (pasa_pv_shift) has its
    // P V computed and rounded to the O format at 2^-shift times its value, and O~'s factor takes the
    // 2^shift (exact powers of two; 1 otherwise), as the kernels do.
    const bool p_running = !pol.two_level || pol.p_running_max;
    const int shift = pasa && !p_running ? pasa_pv_shift(v_block, s2) : 0;
    const double pv_down = std::ldexp(1.0, -shift), o_up = std::ldexp(1.0, shift);
    for (int rr = 0; rr < rows; ++rr) {
      double* x = &scores[static_cast<std::size_t>(rr) * cols];
      const double dq = pq.q_scale[t.r0 + rr];
      // The mean of the row's cols values, summed in sum_acc and rounded once to it.
      const auto block_mean = [&] {
        double sum = 0.0;
        for (int c = 0; c < cols; ++c) sum = R.sum(sum + x[c]);
        return R.sum(sum / cols);
      };
      // pseudo_avg=acc: the mean of S' as the GEMM accumulated it, before the rounding below (PASA
      // admits no quantizer, so dq and the key scales are 1 here).
      const bool acc_mean = pasa && pol.pseudo_avg == PseudoAverage::accumulator;
      const double unrounded_mean = acc_mean ? block_mean() : 0.0;
      // Smooth K took alpha q . mean(K) out of every score of the row: a constant the softmax ignores
      // but the softcap does not (tanh is not shift-invariant), so a softcapped score gets it back
      // first, and the LSE then needs no correction (write_row).
      const double cap_offset = mods.softcapped() ? pq.lse_offset[t.r0 + rr] * unit : 0.0;
      for (int c = 0; c < cols; ++c) {
        const double k_scale = c < n ? kv.k_scale[k0 + c] : 1.0;
        double s = R.s(x[c] * (dq * k_scale));  // dequantize (exact 1 * 1 otherwise)
        if (!pq.ds.empty()) s = R.s(s + pq.ds[k0 + c]);
        x[c] = scaled(s);
        if (mods.softcapped()) x[c] = mods.cap(sm(x[c] + cap_offset), sm);
      }
      // PASA's local pseudo-average s' covers all s2 keys of the block, masked or not: K' = M K
      // subtracted the mean of all of them, so recovering the true scores needs all of them.
      double mean = 0.0;
      if (pasa && pol.pseudo_avg == PseudoAverage::keys) {
        mean = pasa_means[rr];
      } else if (acc_mean) {
        mean = round_average(with_scale(unrounded_mean));
      } else if (pasa) {  // the mean leaves the reduction, rounded once (of scores scaled already)
        mean = round_average(block_mean());
      }
      int mask_saturated = 0;  // visible keys that the mask took below the format's range
      if (mods.has_bias()) {  // the additive mask, after PASA's mean (which K' = M K fixed)
        // A finite mask value that carries a finite score past the softmax format's range (a padding
        // mask of finfo(fp32).min, or finfo(fp16).min in base 2, under an fp16 softmax) saturates to
        // the format's largest value: overflowing to -inf, a key block masked whole made its rows NaN
        // (e^(-inf - (-inf))) although the row's other blocks held visible keys.
        for (int c = 0; c < n; ++c) {
          if (!visible(rr, k0 + c)) continue;
          const double sum = x[c] + mods.bias(t.b, t.h, t.r0 + rr, k0 + c) * unit;
          const double biased = sm(sum);
          const bool saturates = !std::isfinite(biased) && std::isfinite(x[c]);
          mask_saturated += saturates && sum < 0.0;
          x[c] = saturates ? std::copysign(sm_top, sum) : biased;
        }
      }
      // Masking is tracked apart from the values: a score that overflowed to -inf is not a masked key.
      // Without a shift, a block whose visible scores all overflowed adds nothing (their weights are 0
      // beside any finite score, as a kernel that skips a block of maximum -inf gives), but a row whose
      // visible scores all overflowed turns into NaN (write_row): its softmax is finite, and 0 would
      // hide the loss. PASA's S' overflows relative to its block's shift, not to the row's other blocks,
      // so there the block's NaN stands (numerics.md: the limits of S').
      double m_blk = kNegInf;
      int n_visible = 0, n_overflowed = 0;  // (a NaN score is neither: std::max would skip it)
      RowState& st = out.state[rr];
      for (int c = 0; c < n; ++c) {
        if (!visible(rr, k0 + c)) continue;
        m_blk = std::max(m_blk, x[c]);
        n_overflowed += x[c] == kNegInf;
        if (unified) {  // the difference as the exponential below takes it (rounded to the softmax format)
          const double d = sm(x[c] - phi);
          if (!(d > pol.window_lo && d < pol.window_hi)) st.left_window = true;
        }
        ++n_visible;
      }
      const bool block_overflowed = n_visible > 0 && n_overflowed == n_visible && pol.shift == Shift::none;
      st.overflowed = st.overflowed || block_overflowed;
      active[rr] = n_visible > 0 && !block_overflowed;
      if (!active[rr]) {  // every key of this block masked (or overflowed) for this row: it adds nothing
        std::fill(p_op.begin() + static_cast<std::ptrdiff_t>(rr) * n,
                  p_op.begin() + static_cast<std::ptrdiff_t>(rr + 1) * n, 0.0f);
        continue;
      }
      if (unified) m_blk = phi;  // FlashDecoding++: every block measured against the same phi
      double l_blk = 0.0;
      for (int c = 0; c < n; ++c) {
        if (!visible(rr, k0 + c)) {
          x[c] = 0.0;  // reused below as this key's exponential
          continue;
        }
        x[c] = sm(power(pol, sm(x[c] - m_blk)));
        l_blk = R.sum(l_blk + x[c]);
      }
      l_blk = sm(l_blk);
      // P as the P V GEMM takes it, and its row sum as l takes it (times the block's factor ec after,
      // unless P carries it already: p_running, where ec comes in here).
      float* p = &p_op[static_cast<std::size_t>(rr) * n];
      const auto weigh = [&](double ec) {
        for (int c = 0; c < n; ++c) {
          const double e = p_running ? sm(x[c] * ec) : x[c];
          p[c] = static_cast<float>(R.p(e * pol.p_scale));
        }
        if (pol.rowsum != RowSum::p) return l_blk;
        double p_sum = 0.0;  // P as rounded, summed as the P V GEMM sums a column of ones
        model_gemm(p, n, ones.data(), 1, 1, n, 1, R.pv_acc, pol.mma_k, R.sm, &p_sum, 1);
        return sm(p_sum / pol.p_scale);
      };
      // P against the block's own maximum needs no factor: P and its row sum come first, and PASA's
      // headroom weighs the block by that sum (pasa_headroom.h), as the kernels do after the GEMM that
      // gives them the row sums of P.
      double l_row = p_running ? 0.0 : weigh(1.0);
      // PASA: the candidates a (the running reference's) and b (the block's) for the new reference:
      // relative to the maximum, m and the block's recovered maximum; relative to the average, F's
      // update and a = fl(m + d_prev), b = fl(m' + d_cur) for G F_new (docs/algorithms.md section 3:
      // Eq. 15, and its departures' fourth and fifth).
      double F_new = 0.0, a = 0.0, b = 0.0;
      int averaged = st.averaged;
      if (pasa_max) {
        // Relative to the maximum: the block's maximum recovered, m' + G s', in fp32 (saturated) with
        // one rounding, as the kernels take it; the reference is the larger of it and m, exactly.
        // A block that an additive mask took below the format's range (a padding mask of finfo.min:
        // every visible score saturated, or overflowed before the mask) is below every other block,
        // as those keys are in exact attention: its recovered maximum is the state's lowest value, not
        // m' + G s', whose pseudo-average still counts the keys' own scores (large ones put the padding
        // above the visible keys). A row of such blocks alone weighs all their keys alike, as fp32
        // does (the headroom below keeps l and O~ in range).
        const bool saturated = mask_saturated > 0 && m_blk <= -sm_top;
        b = saturated ? -state_top
                      : std::fmin(std::fmax(std::fmaf(gf, static_cast<float>(mean), static_cast<float>(m_blk)), -state_top),
                                  state_top);
        a = st.m;
      } else if (pasa && st.blocks > 0) {
        // Eq. 15's ((j - 1) F + s') / j, written as F + (s' - F) / j: the same average, but without
        // the running sum (j - 1) F, which leaves fp16 once j F > 65504 (a long row of high scores).
        // The difference saturates (means of both signs near the format's largest value).
        const int j = st.averaged + 1;
        const double F_avg = sm(st.F + sm(state_round(mean - st.F) / j));
        // A block whose average would carry a candidate past the state format's range is far from the
        // blocks F averages: where the running maximum would pass it (the block far below them, or F
        // drifted down over several), the block is left out of F; where the block's own maximum would
        // (far above), F starts afresh at its s'. Either way the candidates stay exact, where a
        // saturated one had weighed a key e^-2000 below the row's maximum as the row's maximum. (The
        // tests in fp32: G is a float.)
        const auto passes = [&](float x) { return round_to(state_format, x) >= state_format.max_finite(); };
        const bool far_below = passes(std::fmaf(gf, static_cast<float>(st.F - F_avg), static_cast<float>(st.m)));
        const bool far_above =
            !far_below && passes(std::fmaf(gf, static_cast<float>(mean - F_avg), static_cast<float>(m_blk)));
        F_new = far_below ? st.F : far_above ? mean : F_avg;
        averaged = far_below ? st.averaged : far_above ? 1 : j;
        // fl(base + fl(G fl(x))), the paper's rounding points; where they pass the range, base + G x in
        // fp32, saturated (x: a difference of state values, exact).
        const auto candidate = [&](double base, double x) {
          const double c = sm(base + sm(g * sm(x)));
          if (std::fabs(c) <= state_format.max_finite()) return c;
          return state_round(std::fmaf(gf, static_cast<float>(x), static_cast<float>(base)));
        };
        a = candidate(st.m, st.F - F_new);
        b = candidate(m_blk, mean - F_new);
      } else if (pasa) {
        F_new = mean;  // the row's first block relative to the average: F = s', no move
        averaged = 1;
      }
      double m_new, ep = 0.0, ec = 1.0, floor_moves = 0.0;
      if (unified) {
        m_new = phi;
        ep = st.blocks == 0 ? 0.0 : 1.0;
      } else if (!pasa) {
        if (st.blocks == 0) {
          m_new = state_round(m_blk);
        } else {
          a = state_round(st.m);
          b = state_round(m_blk);
          m_new = std::max(a, b);
          ep = sm(power(pol, sm(a - m_new)));
          ec = sm(power(pol, sm(b - m_new)));
        }
      } else {
        // The row's first block takes its own candidate as the reference (factors 0 and 1), then, like
        // every later block, the headroom (pasa_headroom.h): rounded up, unless that moves too far.
        const bool first = st.blocks == 0;
        if (first) {
          a = kNegInf;
          if (!pasa_max) b = state_round(m_blk);
        }
        m_new = std::max(a, b);
        const bool base2 = pol.exp_base == ExpBase::two;
        // (Relative to the maximum, a difference of fp32 values in fp32.)
        const auto difference = [&](double x) { return pasa_max ? static_cast<float>(x - m_new) : x - m_new; };
        // The block's maximum below the reference; at the state format's floor (the saturated blocks',
        // below; relative to the average, fp16's lowest value, where its step of 32 would round the
        // moves away) the reference is the floor plus the moves kept apart.
        const bool at_floor = m_new == -state_top;
        const auto below = static_cast<float>(at_floor ? -st.floor_moves : difference(b));
        const float weight = p_running ? static_cast<float>(s2) : static_cast<float>(l_row);
        const float h = pasa_headroom(static_cast<float>(st.l), st.w, v_block, below, weight, base2);
        if (h != 0.0f) {
          const double up = round_up_to(state_format, m_new + h);
          const float max_move = pasa_max_move(pol.softmax.man_bits, pol.softmax.min_exponent(), base2);
          m_new = up - m_new <= max_move ? up : state_round(m_new + h);
        }
        ep = first ? 0.0 : sm(power(pol, sm(difference(a))));
        ec = sm(power(pol, sm(difference(b))));
        if (at_floor) {
          // At the floor (a and b both there) the reference cannot move: fp32's step there is 2^104,
          // fp16's 32. The row keeps the headroom's moves apart instead, as if the reference were
          // the floor plus them: l and O~ scale by this block's move, the block by all of them. A later
          // visible block's factor, 0, discards them; a row of such blocks alone divides them out (its
          // LSE is the floor's either way).
          floor_moves = st.floor_moves + h;
          ep = first ? 0.0 : sm(power(pol, -h));
          ec = sm(power(pol, -floor_moves));
        }
      }
      e_prev[rr] = ep;
      e_cur[rr] = p_running ? 1.0 : ec;
      // One accumulator across blocks sees P relative to the new maximum (e_cur folded in), as
      // FlashAttention-2 computes it; two-level accumulation rescales the block's P V instead, unless
      // p_max=running asks for P against the running maximum there too.
      if (p_running) l_row = weigh(ec);
      const double l_add = p_running && pol.rowsum == RowSum::p ? l_row : sm(ec * l_row);
      st.l = sm(sm(ep * st.l) + l_add);
      st.m = m_new;
      st.floor_moves = floor_moves;
      if (pasa) st.w = pasa_output_bound(st.w, static_cast<float>(ep), static_cast<float>(l_add), v_block);
      st.F = F_new;
      st.averaged = averaged;
      st.blocks += 1;
    }

    const float* v = &kv.v[static_cast<std::size_t>(k0 * D)];
    if (!pending.empty()) {
      // Several blocks in pv_acc, P against the running maximum: O and pv_acc rescaled, the block's
      // P V added into pv_acc, which goes into O after every pv_blocks-th key block (counted from the
      // first key, as a kernel counts its blocks) and after the range's last.
      for (int rr = 0; rr < rows; ++rr) {
        if (!active[rr]) continue;
        double* o = &out.acc[static_cast<std::size_t>(rr) * D];
        double* add = &pending[static_cast<std::size_t>(rr) * D];
        for (int d = 0; d < D; ++d) {
          o[d] = R.o(e_prev[rr] * o[d]);
          add[d] = R.pv_acc(e_prev[rr] * add[d]);
        }
      }
      model_gemm(p_op.data(), n, v, D, rows, n, D, R.pv_acc, pol.mma_k, R.pv_acc, pending.data(), D, true);
      if ((k0 / s2 + 1) % pol.pv_blocks == 0 || k0 + s2 >= key_end) {
        for (std::size_t i = 0; i < pending.size(); ++i) {
          out.acc[i] = R.o(out.acc[i] + R.o(pending[i]));
          pending[i] = 0.0;
        }
      }
    } else if (pol.two_level) {
      // A shifted block's V at 2^-shift times its value (exact), so that P V is at that scale in
      // pv_acc itself, whatever its format: the same sums as the kernels' fp32 P V times 2^-shift, and
      // finite in a narrower pv_acc too.
      if (shift > 0) {
        v_shifted.assign(v, v + static_cast<std::ptrdiff_t>(n) * D);
        for (float& x : v_shifted) x = static_cast<float>(x * pv_down);
        v = v_shifted.data();
      }
      model_gemm(p_op.data(), n, v, D, rows, n, D, R.pv_acc, pol.mma_k, R.pv_acc, pv.data(), D);
      for (int rr = 0; rr < rows; ++rr) {
        if (!active[rr]) continue;
        double* o = &out.acc[static_cast<std::size_t>(rr) * D];
        const double* add = &pv[static_cast<std::size_t>(rr) * D];
        for (int d = 0; d < D; ++d) o[d] = R.o(R.o(e_prev[rr] * o[d]) + R.o(e_cur[rr] * o_up * R.o(add[d])));
      }
    } else {
      for (int rr = 0; rr < rows; ++rr) {
        if (!active[rr]) continue;
        double* o = &out.acc[static_cast<std::size_t>(rr) * D];
        for (int d = 0; d < D; ++d) o[d] = acc_round(e_prev[rr] * o[d]);
      }
      model_gemm(p_op.data(), n, v, D, rows, n, D, R.pv_acc, pol.mma_k, R.pv_acc, out.acc.data(), D, true);
    }
  }
  return out;
}

// Runs every split of the key axis for one query block.
std::vector<Partial> run_splits(const AttentionArgs& args, const Policy& pol, const ProblemShape& ps,
                                const Task& t, const PreparedQ& pq, const PreparedKV& kv, double alpha,
                                const Rounders& R) {
  std::vector<Partial> parts;
  const std::int64_t per_split = (ps.seq_kv + pol.splits - 1) / pol.splits;
  // Split boundaries fall on key blocks so every split sees whole blocks (as split-KV kernels do).
  const std::int64_t step = ((per_split + pol.block_kv - 1) / pol.block_kv) * pol.block_kv;
  for (std::int64_t k0 = 0; k0 < ps.seq_kv; k0 += step) {
    parts.push_back(run_key_range(args, pol, ps, t, k0, std::min(k0 + step, ps.seq_kv), pq, kv, alpha, R));
  }
  return parts;
}

// One part, or FlashDecoding++'s unified max: the partials of row rr share one reference and simply add
// up. Returns l; o (D values, zero on entry) becomes O~.
double add_partials(const std::vector<Partial>& parts, int rr, const Rounders& R, std::vector<double>& o) {
  const std::size_t D = o.size();
  double l = 0.0;
  for (const Partial& p : parts) {
    if (p.state[rr].blocks == 0) continue;
    l = R.sm(l + p.state[rr].l);
    for (std::size_t d = 0; d < D; ++d) o[d] = R.o(o[d] + p.acc[rr * D + d]);
  }
  return l;
}

// Merges the splits of one row and writes O and the LSE.
// g: the policy's PASA invariance (pasa_invariance), computed once per call.
void write_row(const AttentionArgs& args, const Policy& pol, double g, const ProblemShape& ps, const Task& t, int rr,
               const std::vector<Partial>& parts, const PreparedQ& pq, const PreparedKV& kv,
               const Rounders& R) {
  const int D = static_cast<int>(ps.dim);
  std::vector<double> o(static_cast<std::size_t>(D), 0.0);
  // O~ / (l p_scale) in the O format, one rounding: O~ carries P's static factor, which the quotient
  // divides out with l (O~ / l rounded to the O format first can pass its range where O does not:
  // `pasa,p=int8,p_scale=127` gave 516 for V = 1000 that way). Exact attention's O, a convex combination
  // of V's rows, cannot pass V's largest magnitude, but the quotient can by its error (V at fp16's
  // largest value); a finite quotient therefore saturates at the format's largest value where
  // rounding would give inf (an O~ that overflowed stays inf, a NaN NaN).
  const Format o_saturating = saturating(R.o.format());
  const auto divide = [&](double num, double den) {
    const double q = num / den;
    return std::isfinite(q) ? round_to(o_saturating, q) : R.o(q);
  };
  double lse = kNegInf;
  int with_keys = 0;
  bool overflowed = false;
  for (const Partial& p : parts) {
    with_keys += p.state[rr].blocks > 0;
    overflowed = overflowed || p.state[rr].overflowed;
  }
  if (with_keys == 0 && overflowed) {  // visible keys, every score of them overflowed to -inf
    std::fill(o.begin(), o.end(), std::numeric_limits<double>::quiet_NaN());
    lse = std::numeric_limits<double>::quiet_NaN();
  } else if (with_keys == 0) {
    // no visible key: O = 0, LSE = -inf
  } else if (parts.size() == 1 || pol.shift == Shift::unified) {
    const double l = add_partials(parts, rr, R, o);
    const RowState& st = parts.front().state[rr];
    const double m = pol.shift == Shift::unified ? R.sm(pol.phi) : st.m;
    for (int d = 0; d < D; ++d) o[d] = divide(o[d], l * pol.p_scale);
    lse = row_lse(pol, m, l, g, st.F);
  } else {
    // Exact merge (algorithms.md section 1) of the normalised partials, in fp64. Each part weighs
    // e^(its reference - the largest) times its l, which is e^(its LSE - the largest LSE), with log l
    // (and PASA's moves kept apart at the floor) out of the sum with the reference: a reference near
    // the format's lowest value (a row padded whole with finfo.min) absorbs them, and the parts of such
    // a row then weighed alike whatever their number of keys.
    const auto reference = [&](const RowState& st) {
      return st.blocks == 0 ? kNegInf : (st.m + g * st.F) / score_unit(pol);
    };
    const auto moves = [&](const RowState& st) { return st.floor_moves / score_unit(pol); };
    const RowState* top = nullptr;  // the part of the largest reference, then the most moves
    for (const Partial& p : parts) {
      const RowState& st = p.state[rr];
      if (st.blocks == 0) continue;
      if (top == nullptr || reference(st) > reference(*top) ||
          (reference(st) == reference(*top) && moves(st) > moves(*top))) {
        top = &st;
      }
    }
    double weight_sum = 0.0;
    for (const Partial& p : parts) {
      const RowState& st = p.state[rr];
      if (st.blocks == 0) continue;
      const double w = std::exp((reference(st) - reference(*top)) + (moves(st) - moves(*top))) * st.l;
      weight_sum += w;
      for (int d = 0; d < D; ++d) o[d] += w * divide(p.acc[static_cast<std::size_t>(rr) * D + d], st.l * pol.p_scale);
    }
    for (int d = 0; d < D; ++d) o[d] = divide(o[d], weight_sum);
    lse = reference(*top) + moves(*top) + std::log(weight_sum);
  }
  const std::int64_t r = t.r0 + rr;
  for (int d = 0; d < D; ++d) {
    double value = o[d];
    if (with_keys > 0) {  // undo V's quantization scale and V's smoothing
      value = R.o(R.o(value * kv.v_scale[d]) + kv.v_mean[d]);
    }
    // Exact attention's O, a convex combination of V's rows, cannot pass V's largest magnitude, but a
    // quantized V's values can, by its quantization error: O saturates at a 16-bit output's largest
    // finite value (the value nearest exact attention's) where rounding would give inf.
    if (pol.v_quant && args.o.dtype != DType::f32) {  // (NaN stays NaN)
      value = round_to(saturating(args.o.dtype == DType::f16 ? Format::fp16() : Format::bf16()), value);
    }
    store_from_double(args.o.data, args.o.dtype, args.o.offset(t.b, t.h, r, d), value);
  }
  if (args.lse.data != nullptr) {
    // What smooth K took out of every score of the row (a softcapped row had it added back before
    // the cap, run_key_range).
    if (with_keys > 0 && args.softcap <= 0.0) lse += pq.lse_offset[r];
    args.lse.data[t.b * args.lse.stride[0] + t.h * args.lse.stride[1] + r * args.lse.stride[2]] =
        static_cast<float>(lse);
  }
}

}  // namespace

void check_emulator_policy(const AttentionArgs& args, std::int64_t dim) {
  const Policy& pol = args.policy;
  if (pol.shift != Shift::pasa) return;
  const double alpha = resolve_scale(args, dim) * score_unit(pol);
  check_pasa_shift(pol.beta, pol.block_kv, pol.scale == ScalePlacement::key ? alpha : 1.0, pol.input);
}

void emulate_attention(const AttentionArgs& args, const ProblemShape& ps) {
  const Policy& pol = args.policy;
  const double alpha = resolve_scale(args, ps.dim) * score_unit(pol);
  check_emulator_policy(args, ps.dim);  // (M depends on the call's scale: checked before any work)
  const Rounders R(pol);
  check_fits_input(args.q, "q", R.input);
  check_fits_input(args.k, "k", R.input);
  check_fits_input(args.v, "v", R.input);
  const std::int64_t kv_heads = ps.batch * ps.heads_kv, q_heads = ps.batch * ps.heads_q;
  std::vector<PreparedKV> kv(static_cast<std::size_t>(kv_heads));
  parallel_for(kv_heads, [&](std::int64_t i) {
    kv[i] = prepare_kv(args, ps, i / ps.heads_kv, i % ps.heads_kv, alpha, R);
  });
  std::vector<PreparedQ> qs(static_cast<std::size_t>(q_heads));
  parallel_for(q_heads, [&](std::int64_t i) {
    const std::int64_t b = i / ps.heads_q, h = i % ps.heads_q;
    qs[i] = prepare_q(args, ps, b, h, kv[b * ps.heads_kv + h / ps.group()], alpha, R);
  });

  Policy synchronized = pol;  // FlashDecoding++'s fallback: the max-tracking algorithm
  synchronized.shift = Shift::none;
  const double g = pasa_invariance(pol, alpha), g_synchronized = pasa_invariance(synchronized, alpha);
  const std::int64_t s1 = pol.block_q;
  const std::int64_t q_blocks = (ps.seq_q + s1 - 1) / s1;
  const std::int64_t tasks = q_heads * q_blocks;
  std::atomic<std::int64_t> recomputed{0};
  parallel_for(tasks, [&](std::int64_t i) {
    const std::int64_t head = i / q_blocks, blk = i % q_blocks;
    const Task t{head / ps.heads_q, head % ps.heads_q, blk * s1, std::min((blk + 1) * s1, ps.seq_q)};
    const PreparedKV& kvh = kv[t.b * ps.heads_kv + t.h / ps.group()];
    const PreparedQ& qh = qs[head];
    const std::vector<Partial> parts = run_splits(args, pol, ps, t, qh, kvh, alpha, R);
    std::vector<Partial> fallback;
    std::vector<double> sums(static_cast<std::size_t>(ps.dim));
    for (int rr = 0; rr < static_cast<int>(t.r1 - t.r0); ++rr) {
      // Recomputed: a row some x - phi left the window of, or (unified) whose sums did not stay
      // finite: the window bounds each weight, not the sum of a long row of them in l or O~, nor that
      // of the splits' partials, which each may hold while their sum overflows.
      bool left = std::any_of(parts.begin(), parts.end(), [&](const Partial& p) { return p.state[rr].left_window; });
      if (!left && pol.shift == Shift::unified) {
        std::fill(sums.begin(), sums.end(), 0.0);
        left = !std::isfinite(add_partials(parts, rr, R, sums)) ||
               !std::all_of(sums.begin(), sums.end(), [](double x) { return std::isfinite(x); });
      }
      if (!left) {
        write_row(args, pol, g, ps, t, rr, parts, qh, kvh, R);
        continue;
      }
      if (fallback.empty()) fallback = run_splits(args, synchronized, ps, t, qh, kvh, alpha, R);
      write_row(args, synchronized, g_synchronized, ps, t, rr, fallback, qh, kvh, R);
      recomputed.fetch_add(1, std::memory_order_relaxed);
    }
  });
  if (args.stats != nullptr) {
    args.stats->rows = ps.batch * ps.heads_q * ps.seq_q;
    args.stats->recomputed_rows = recomputed.load();
  }
}

}  // namespace pasa
