// The policy emulator: one online-softmax loop that rounds where the policy says.
//
// Structure (spec sections 1 and 3, the paper's Algorithm 1): for each query block i and key block j,
//   S' = fl_s(Q_i K'_j^T)                  K' = K, alpha K, or M K (PASA's shifting matrix)
//   x  = fl_sm(S' * alpha) or fl_sm(S')    scores in the softmax format
//   m' = rowmax(x), P = exp(x - m'), l' = rowsum(P)          (the block's own maximum)
//   shift terms dm'_prev, dm'_cur (zero without PASA), m_new, the two rescale factors
//   l = e_prev l + e_cur l',  O~ = e_prev O~ + e_cur fl_o(P V_j)
// With shift=none the shift terms are exactly zero and this is FlashAttention-2 written with the
// block-local maximum, so PASA with beta = 0 is the same computation bit for bit (tested).
// Every arithmetic result is rounded by the format of the point it belongs to ("sm" = softmax).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/backends.h"
#include "cpu/gemm_model.h"
#include "cpu/host_inputs.h"
#include "numerics/rounder.h"
#include "storage_convert.h"

namespace pasa {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The policy's formats, compiled once per call.
struct Rounders {
  Rounder input, qk_acc, s, sm, p, pv_acc, o;
  explicit Rounders(const Policy& pol)
      : input(pol.input), qk_acc(pol.qk_acc), s(pol.s), sm(pol.softmax), p(pol.p),
        pv_acc(pol.pv_acc), o(pol.o) {}
};

// K and V of one K/V head, ready for the loop: K' per key block, transposed to [D][n] so the score
// GEMM's inner loop runs over keys; V as [S_kv][D].
struct PreparedKV {
  std::vector<float> kt;  // block j at offset j * block_kv * D, laid out [D][n_j]
  std::vector<float> v;
};

// PASA's shifting matrix for a block of n keys: M = (I - beta/n J) * factor, stored in the input
// format (diagonal a', off-diagonal -b', spec section 3).
std::vector<float> shifting_matrix(int n, double beta, double factor, const Rounder& to_input) {
  const double off = to_input(-(beta / n) * factor);
  const double diag = to_input((1.0 - beta / n) * factor);
  std::vector<float> m(static_cast<std::size_t>(n) * n, static_cast<float>(off));
  for (int i = 0; i < n; ++i) m[static_cast<std::size_t>(i) * n + i] = static_cast<float>(diag);
  return m;
}

PreparedKV prepare_kv(const AttentionArgs& args, const ProblemShape& ps, std::int64_t b,
                      std::int64_t h_kv, double alpha, const Rounders& R) {
  const Policy& pol = args.policy;
  const int D = static_cast<int>(ps.dim);
  const int s2 = pol.block_kv;
  std::vector<float> k = gather_head<float>(args.k, b, h_kv, R.input);
  PreparedKV out{std::vector<float>(k.size()), gather_head<float>(args.v, b, h_kv, R.input)};
  const double key_factor = pol.scale == ScalePlacement::key ? alpha : 1.0;
  if (pol.shift == Shift::none && pol.scale == ScalePlacement::key) {
    const double a = R.input(alpha);
    for (float& x : k) x = static_cast<float>(R.input(a * x));
  }
  std::vector<double> shifted;
  for (std::int64_t k0 = 0; k0 < ps.seq_kv; k0 += s2) {
    const int n = static_cast<int>(std::min<std::int64_t>(s2, ps.seq_kv - k0));
    const float* kj = &k[static_cast<std::size_t>(k0 * D)];
    std::vector<float> block(kj, kj + static_cast<std::size_t>(n) * D);
    if (pol.shift == Shift::pasa) {
      // K'_j = M K_j: a GEMM on the matrix engine, its output stored in the input format.
      const std::vector<float> m = shifting_matrix(n, pol.beta, key_factor, R.input);
      shifted.resize(static_cast<std::size_t>(n) * D);
      model_gemm(m.data(), n, kj, D, n, n, D, R.qk_acc, R.input, shifted.data(), D);
      std::copy(shifted.begin(), shifted.end(), block.begin());
    }
    float* dst = &out.kt[static_cast<std::size_t>(k0 * D)];
    for (int c = 0; c < n; ++c)
      for (int d = 0; d < D; ++d) dst[d * n + c] = block[static_cast<std::size_t>(c) * D + d];
  }
  return out;
}

// Running state of one query row.
struct RowState {
  double m = kNegInf;  // running max, relative to the reference g * F
  double l = 0.0;      // running sum of exponentials
  double F = 0.0;      // PASA's global pseudo-average (Eq. 15)
  int blocks = 0;      // key blocks seen (the j of Eq. 15)
};

void run_query_block(const AttentionArgs& args, const ProblemShape& ps, std::int64_t b,
                     std::int64_t h, std::int64_t r0, std::int64_t r1, const PreparedKV& kv,
                     double alpha, const Rounders& R) {
  const Policy& pol = args.policy;
  const int D = static_cast<int>(ps.dim);
  const int s2 = pol.block_kv;
  const int rows = static_cast<int>(r1 - r0);
  const bool pasa = pol.shift == Shift::pasa;
  const auto& sm = R.sm;
  const double alpha_sm = sm(alpha);
  const double g = pasa ? sm(pol.beta / (1.0 - pol.beta)) : 0.0;

  std::vector<float> q = gather_rows<float>(args.q, b, h, r0, r1, R.input);
  if (pol.scale == ScalePlacement::query) {
    const double a = R.input(alpha);
    for (float& x : q) x = static_cast<float>(R.input(a * x));
  }

  std::vector<RowState> state(rows);
  std::vector<double> acc(static_cast<std::size_t>(rows) * D, 0.0);  // O~
  std::vector<double> scores(static_cast<std::size_t>(rows) * s2);
  std::vector<float> p_op(static_cast<std::size_t>(rows) * s2);        // P as the GEMM operand
  std::vector<double> pv(static_cast<std::size_t>(rows) * D);
  std::vector<double> e_prev(rows), e_cur(rows);
  std::vector<char> active(rows);

  // Key blocks past the last key any row of this block may see are skipped whole.
  std::int64_t key_end = ps.seq_kv;
  if (args.causal) {
    const std::int64_t last =
        args.alignment == CausalAlignment::bottom_right ? (r1 - 1) + ps.seq_kv - ps.seq_q : r1 - 1;
    key_end = std::clamp<std::int64_t>(last + 1, 0, ps.seq_kv);
  }

  for (std::int64_t k0 = 0; k0 < key_end; k0 += s2) {
    const int n = static_cast<int>(std::min<std::int64_t>(s2, ps.seq_kv - k0));
    const float* kt = &kv.kt[static_cast<std::size_t>(k0 * D)];
    model_gemm(q.data(), D, kt, n, rows, D, n, R.qk_acc, R.s, scores.data(), n);

    for (int rr = 0; rr < rows; ++rr) {
      double* x = &scores[static_cast<std::size_t>(rr) * n];
      float* p = &p_op[static_cast<std::size_t>(rr) * n];
      for (int c = 0; c < n; ++c) {
        x[c] = pol.scale == ScalePlacement::scores ? sm(x[c] * alpha_sm) : sm(x[c]);
      }
      // PASA's local pseudo-average s' covers all n keys of the block, masked or not: K' = M K
      // subtracted the mean of all n keys, so recovering the true scores needs all of them.
      double mean = 0.0;
      if (pasa) {
        double sum = 0.0;
        for (int c = 0; c < n; ++c) sum = sm(sum + x[c]);
        mean = sm(sum / n);
      }
      // Masking is tracked apart from the values: a score that overflowed to -inf is not a masked
      // key, and a row whose visible scores all overflowed must turn into NaN as it would on hardware.
      double m_blk = kNegInf;
      int visible = 0;
      for (int c = 0; c < n; ++c) {
        if (key_visible(args.causal, args.alignment, r0 + rr, k0 + c, ps.seq_q, ps.seq_kv)) {
          m_blk = std::max(m_blk, x[c]);
          ++visible;
        } else {
          x[c] = kNegInf;
          p[c] = 0.0f;
        }
      }
      active[rr] = visible > 0;
      if (!active[rr]) continue;  // every key of this block masked for this row: it adds nothing
      double l_blk = 0.0;
      for (int c = 0; c < n; ++c) {
        if (!key_visible(args.causal, args.alignment, r0 + rr, k0 + c, ps.seq_q, ps.seq_kv)) continue;
        const double e = sm(std::exp(sm(x[c] - m_blk)));
        l_blk = sm(l_blk + e);
        p[c] = static_cast<float>(R.p(e));
      }
      RowState& st = state[rr];
      double d_prev = 0.0, d_cur = 0.0;  // dm'_prev, dm'_cur: moving the reference to F_new
      double F_new = 0.0;
      if (pasa) {
        const int j = st.blocks + 1;
        F_new = sm(sm(sm((j - 1) * st.F) + mean) / j);
        d_prev = sm(g * sm(st.F - F_new));
        d_cur = sm(g * sm(mean - F_new));
      }
      double m_new, ep = 0.0;
      if (st.blocks == 0) {
        m_new = sm(m_blk + d_cur);
      } else {
        m_new = std::max(sm(st.m + d_prev), sm(m_blk + d_cur));
        ep = sm(std::exp(sm(sm(st.m - m_new) + d_prev)));
      }
      const double ec = sm(std::exp(sm(sm(m_blk - m_new) + d_cur)));
      st.l = sm(sm(ep * st.l) + sm(ec * l_blk));
      st.m = m_new;
      st.F = F_new;
      st.blocks += 1;
      e_prev[rr] = ep;
      e_cur[rr] = ec;
    }

    model_gemm(p_op.data(), n, &kv.v[static_cast<std::size_t>(k0 * D)], D, rows, n, D, R.pv_acc,
               R.o, pv.data(), D);
    for (int rr = 0; rr < rows; ++rr) {
      if (!active[rr]) continue;
      double* o = &acc[static_cast<std::size_t>(rr) * D];
      const double* add = &pv[static_cast<std::size_t>(rr) * D];
      for (int d = 0; d < D; ++d) o[d] = R.o(R.o(e_prev[rr] * o[d]) + R.o(e_cur[rr] * add[d]));
    }
  }

  for (int rr = 0; rr < rows; ++rr) {
    const RowState& st = state[rr];
    const bool empty = st.blocks == 0;  // no visible key: O = 0, LSE = -inf
    for (int d = 0; d < D; ++d) {
      const double value = empty ? 0.0 : R.o(acc[static_cast<std::size_t>(rr) * D + d] / st.l);
      store_from_double(args.o.data, args.o.dtype, args.o.offset(b, h, r0 + rr, d), value);
    }
    if (args.lse.data != nullptr) {
      // The state is relative to the reference g * F: add it back (spec section 3).
      const double lse = empty ? kNegInf : st.m + std::log(st.l) + g * st.F;
      args.lse.data[b * args.lse.stride[0] + h * args.lse.stride[1] + (r0 + rr) * args.lse.stride[2]] =
          static_cast<float>(lse);
    }
  }
}

}  // namespace

void emulate_attention(const AttentionArgs& args, const ProblemShape& ps) {
  const double alpha = resolve_scale(args, ps.dim);
  const Rounders R(args.policy);
  const std::int64_t kv_heads = ps.batch * ps.heads_kv;
  std::vector<PreparedKV> prepared(static_cast<std::size_t>(kv_heads));
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t i = 0; i < kv_heads; ++i) {
    prepared[i] = prepare_kv(args, ps, i / ps.heads_kv, i % ps.heads_kv, alpha, R);
  }
  const std::int64_t s1 = args.policy.block_q;
  const std::int64_t q_blocks = (ps.seq_q + s1 - 1) / s1;
  const std::int64_t tasks = ps.batch * ps.heads_q * q_blocks;
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t t = 0; t < tasks; ++t) {
    const std::int64_t blk = t % q_blocks;
    const std::int64_t h = (t / q_blocks) % ps.heads_q;
    const std::int64_t b = t / (q_blocks * ps.heads_q);
    const std::int64_t r0 = blk * s1;
    const std::int64_t r1 = std::min(r0 + s1, ps.seq_q);
    run_query_block(args, ps, b, h, r0, r1, prepared[b * ps.heads_kv + h / ps.group()], alpha, R);
  }
}

}  // namespace pasa
