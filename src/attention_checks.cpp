// SPDX-License-Identifier: Apache-2.0
#include "attention_checks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>

#include "interrupt.h"
#include "memory_overlap.h"
#include "numerics/pasa_shift.h"
#include "pasa/error.h"
#include "storage_convert.h"
#include "text/format.h"

namespace pasa {

void check_view(const TensorView& t, const char* name, bool is_output, ViewForm form) {
  const int dt = static_cast<int>(t.dtype);
  if (dt < 0 || dt > static_cast<int>(DType::bf16)) {
    throw Error(text::format("{}: unsupported dtype (code {}); use f32, f16 or bf16", name, dt));
  }
  const int device = static_cast<int>(t.device);
  if (device < 0 || device > static_cast<int>(Device::cuda)) {
    throw Error(text::format("{}: unknown device (code {}); use Device::cpu or Device::cuda", name, device));
  }
  const bool packed = form == ViewForm::packed;
  if (packed && t.shape[0] != 1) {
    throw Error(text::format("{}: batch size {}; a packed tensor [total, H, D] is one batch of all the tokens "
                             "(packed_view makes its [1, H, total, D] view)", name, t.shape[0]));
  }
  // The dimensions in the caller's order, with their names; a packed tensor's batch axis (size 1) is the
  // view's, not the caller's.
  struct Dim {
    int axis;
    const char* name;
  };
  static constexpr Dim bhsd_dims[] = {{0, "batch"}, {1, "heads"}, {2, "sequence"}, {3, "head dim"}};
  static constexpr Dim packed_dims[] = {{2, "token"}, {1, "heads"}, {3, "head dim"}};
  const std::span<const Dim> dims = packed ? std::span<const Dim>(packed_dims) : std::span<const Dim>(bhsd_dims);
  if (packed && t.seq() < 0) throw Error(text::format("{}: token count is {} (must be >= 0)", name, t.seq()));
  // A packed batch may hold no token (flash-attn takes such batches too): an empty view, whose strides
  // and data pointer address nothing (NumPy gives a zero-size array strides of 0, torch a null pointer).
  const bool empty = packed && t.seq() == 0;
  for (const auto& [i, dim] : dims) {
    if (t.shape[i] <= 0 && !(packed && i == 2)) {
      throw Error(text::format("{}: {} size is {} (every dimension must be at least 1; zero-length "
                               "sequences are not attention problems)", name, dim, t.shape[i]));
    }
    if (!empty && t.shape[i] != 1 && t.stride[i] < (is_output ? 1 : 0)) {  // (a size-1 one's is never read)
      throw Error(text::format("{}: stride of the {} dimension is {} (must be {})", name, dim,
                               t.stride[i], is_output ? "positive" : "non-negative"));
    }
  }
  // After the sizes: a tensor without elements has no data pointer, and (but for an empty packed view)
  // its size is the error to report.
  if (t.data == nullptr && !empty) throw Error(text::format("{}: data pointer is null", name));
  if (!empty) check_reach(memory_of(t), name);
}

// The scale multiplies in the softmax format (scale=s) or the input format (scale=q|k), in the scores'
// units (times log2 e with exp_base=2), and every kernel holds it in fp32: a scale beyond those
// formats' range becomes inf there and turns every output into NaN while the fp64 reference is finite,
// so it is refused; so is a nonzero scale below their smallest normal value, which rounds to 0 there
// (every key then weighs the same) or keeps only a few bits.
void check_scale(double scale, const Policy& policy, const char* name) {
  if (!std::isfinite(scale)) throw Error(text::format("{}: {} is not finite", name, scale));
  const Format& applied = policy.scale == ScalePlacement::scores ? policy.softmax : policy.input;
  const char* units = policy.exp_base == ExpBase::two ? " (in base-2 units: times log2 e)" : "";
  const double limit = std::min(Format::fp32().max_finite(), applied.max_finite()) / score_unit(policy);
  if (std::fabs(scale) > limit) {
    throw Error(text::format("{}: {:g} is outside [-{:g}, {:g}], the range of fp32 and of the {} format "
                            "the policy applies it in{}", name, scale, limit, limit, applied.name(), units));
  }
  const double floor = std::max(Format::fp32().min_normal(), applied.min_normal()) / score_unit(policy);
  if (scale != 0.0 && std::fabs(scale) < floor) {
    throw Error(text::format("{}: {:g} is below {:g} in magnitude, the smallest normal value of fp32 and of the "
                            "{} format the policy applies it in{}: it would round to 0 or keep only a few "
                            "bits there", name, scale, floor, applied.name(), units));
  }
  // pasa's scale=k folds the scale into the shifting matrix M, where one too small (0 too) rounds M
  // singular: told from the scale alone, before any work.
  if (policy.shift == Shift::pasa && policy.scale == ScalePlacement::key) {
    check_pasa_shift(policy.beta, policy.block_kv, scale * score_unit(policy), policy.input);
  }
}

namespace {

// "[B, H, S, D]", or "[total, H, D]" for a packed view: a view's shape as its caller sees it.
std::string shape_text(const TensorView& t, ViewForm form) {
  if (form == ViewForm::packed) return text::format("[{}, {}, {}]", t.shape[2], t.shape[1], t.shape[3]);
  return text::format("[{}, {}, {}, {}]", t.shape[0], t.shape[1], t.shape[2], t.shape[3]);
}

// The window, softcap and mask: values, the mask's shape against the problem, its values on the host.
void check_score_mods(const AttentionArgs& a, const ProblemShape& p) {
  if (a.window_left < -1 || a.window_right < -1) {
    throw Error(text::format("window_size: ({}, {}) has a side below -1 (-1 = unbounded, else the number "
                            "of keys seen on that side)", a.window_left, a.window_right));
  }
  if (!(a.softcap >= 0.0 && std::isfinite(a.softcap))) {
    throw Error(text::format("softcap: {} must be finite and >= 0 (0 = no softcap)", a.softcap));
  }
  // The cap's steps (s / softcap, tanh, softcap * t) run in the softmax format, and every kernel holds
  // the softcap in fp32: past those formats' range s / softcap is 0 there and every score with it.
  const double cap_limit = std::min(Format::fp32().max_finite(), a.policy.softmax.max_finite());
  if (a.softcap > cap_limit) {
    throw Error(text::format("softcap: {:g} is above {:g}, the range of fp32 and of the {} format the policy "
                            "caps scores in", a.softcap, cap_limit, a.policy.softmax.name()));
  }
  if (a.softcap > 0.0 && a.policy.shift == Shift::pasa) {
    throw Error("softcap: PASA's shifted scores (shift=pasa) cannot be soft-capped (tanh of a shifted "
                "score is not a shifted tanh); use another policy or softcap=0");
  }
  if (a.softcap > 0.0 && a.policy.exp_base == ExpBase::two) {
    throw Error("softcap: the softcap is defined on natural-unit scores, and this policy keeps base-2 "
                "scores (exp_base=2); use exp_base=e or softcap=0");
  }
  const MaskView& m = a.mask;
  if (m.kind == MaskKind::none) return;
  if (static_cast<int>(m.kind) < 0 || static_cast<int>(m.kind) > static_cast<int>(MaskKind::boolean)) {
    throw Error("attn_mask: unknown mask kind");
  }
  if (m.data == nullptr) throw Error("attn_mask: data pointer is null");
  if (m.kind == MaskKind::additive &&
      (static_cast<int>(m.dtype) < 0 || static_cast<int>(m.dtype) > static_cast<int>(DType::bf16))) {
    throw Error("attn_mask: an additive mask must be f32, f16 or bf16");
  }
  const std::array<std::int64_t, 4> want{p.batch, p.heads_q, p.seq_q, p.seq_kv};
  static const char* dims[] = {"batch", "heads", "query", "key"};
  for (int i = 0; i < 4; ++i) {
    const bool broadcast = i < 2 && m.shape[i] == 1;
    if (m.shape[i] != want[i] && !broadcast) {
      throw Error(text::format("attn_mask: shape [{}, {}, {}, {}] does not broadcast to [B, H_q, S_q, "
                              "S_kv] = [{}, {}, {}, {}] (its {} size must be {}{})", m.shape[0], m.shape[1],
                              m.shape[2], m.shape[3], want[0], want[1], want[2], want[3], dims[i], want[i],
                              i < 2 && want[i] != 1 ? " or 1" : ""));
    }
    if (m.stride[i] < 0) throw Error("attn_mask: strides must be non-negative");
  }
  check_reach(memory_of(m), "attn_mask");
  if (m.device != a.q.device) throw Error("attn_mask: on a different device than q");
  check_mask_values(m);
}

}  // namespace

void check_mask_values(const MaskView& m) {
  if (m.kind != MaskKind::additive || m.device != Device::cpu) return;
  // A broadcast (stride-0) dimension repeats its first elements: each distinct element is read once,
  // so a small mask broadcast over a long sequence costs what the mask holds, not what it spans.
  std::array<std::int64_t, 4> n{};
  for (int i = 0; i < 4; ++i) n[i] = m.stride[i] == 0 ? std::min<std::int64_t>(m.shape[i], 1) : m.shape[i];
  InterruptPoll interrupt;
  for (std::int64_t b = 0; b < n[0]; ++b)
    for (std::int64_t h = 0; h < n[1]; ++h)
      for (std::int64_t r = 0; r < n[2]; ++r) {
        if (r % kRowsPerPoll == 0) interrupt.poll();
        for (std::int64_t c = 0; c < n[3]; ++c) {
          const float x = load_as_float(m.data, m.dtype,
                                        b * m.stride[0] + h * m.stride[1] + r * m.stride[2] + c * m.stride[3]);
          if (std::isnan(x) || x == std::numeric_limits<float>::infinity()) {
            throw Error(text::format("attn_mask: {} at [{}, {}, {}, {}] (an additive mask holds finite values "
                                    "or -inf)", x, b, h, r, c));
          }
        }
      }
}

std::array<std::int64_t, 4> canonical_strides(const TensorView& t) {
  std::array<std::int64_t, 4> s = t.stride;
  if (t.shape[3] == 1) s[3] = 1;
  for (int i = 2; i >= 0; --i) {
    if (t.shape[i] == 1) s[i] = s[i + 1] * t.shape[i + 1];
  }
  return s;
}

ProblemShape check_attention_args(const AttentionArgs& a, ViewForm form) {
  const ProblemShape p = check_attention_problem(a, form);
  check_output_memory(a, form);
  return p;
}

void check_output_memory(const AttentionArgs& a, ViewForm form) {
  if (form == ViewForm::packed) {  // o's own elements first, so that an error names its [total, H, D]
    const TensorView& o = a.o;
    const std::array<std::int64_t, 3> shape{o.shape[2], o.shape[1], o.shape[3]};
    const std::array<std::int64_t, 3> stride{o.stride[2], o.stride[1], o.stride[3]};
    check_no_self_overlap({o.data, static_cast<std::int64_t>(dtype_size(o.dtype)), shape, stride}, "o");
  }
  NamedMemory read[4] = {{memory_of(a.q), "q"}, {memory_of(a.k), "k"}, {memory_of(a.v), "v"}};
  std::size_t n = 3;
  if (a.mask.kind != MaskKind::none) read[n++] = {memory_of(a.mask), "attn_mask"};
  check_outputs(a.o, a.lse, {read, n});
}

ProblemShape check_attention_problem(const AttentionArgs& a, ViewForm form) {
  check_view(a.q, "q", false, form);
  check_view(a.k, "k", false, form);
  check_view(a.v, "v", false, form);
  check_view(a.o, "o", true, form);
  const ProblemShape p{a.q.batch(), a.q.heads(), a.k.heads(), a.q.seq(), a.k.seq(), a.q.dim()};
  if (a.k.batch() != p.batch || a.v.batch() != p.batch) {
    throw Error(text::format("k/v: batch sizes {} and {} differ from q's {}", a.k.batch(), a.v.batch(),
                             p.batch));
  }
  if (a.k.dim() != p.dim) {  // (before v against k: a k whose head dim is wrong is named, not v)
    throw Error(text::format("k: head dim {} differs from q's {}", a.k.dim(), p.dim));
  }
  if (a.v.shape != a.k.shape) {
    throw Error(text::format("v: shape {} differs from k's {}", shape_text(a.v, form), shape_text(a.k, form)));
  }
  if (p.heads_q % p.heads_kv != 0) {
    throw Error(text::format("k: {} K/V heads do not divide the {} query heads (GQA needs H_q to be a "
                             "multiple of H_kv)", p.heads_kv, p.heads_q));
  }
  if (a.o.shape != a.q.shape) {
    throw Error(text::format("o: shape {} differs from q's {}", shape_text(a.o, form), shape_text(a.q, form)));
  }
  const Device dev = a.q.device;
  if (a.k.device != dev || a.v.device != dev || a.o.device != dev) {
    throw Error("q, k, v, o: tensors are on different devices");
  }
  if (a.lse.data != nullptr) {
    if (a.lse.shape != std::array<std::int64_t, 3>{p.batch, p.heads_q, p.seq_q}) {
      throw Error(text::format("lse: shape [{}, {}, {}] is not {} = [{}, {}, {}]", a.lse.shape[0],
                               a.lse.shape[1], a.lse.shape[2],
                               form == ViewForm::packed ? "[1, H_q, total_q]" : "[B, H_q, S_q]", p.batch,
                               p.heads_q, p.seq_q));
    }
    if (a.lse.device != dev) throw Error("lse: on a different device than q");
    for (int i = 0; i < 3; ++i) {
      // (An empty LSE, of a packed batch without tokens, addresses nothing: NumPy gives [H, 0] stride
      // 0; nor is a size-1 dimension's stride read, as check_view takes any there.)
      if (a.lse.stride[i] < 1 && p.seq_q > 0 && a.lse.shape[i] != 1) {
        throw Error(text::format("lse: stride {} is {} (must be positive)", i, a.lse.stride[i]));
      }
    }
    check_reach(memory_of(a.lse), "lse");
  }
  if (a.scale) check_scale(*a.scale, a.policy);
  const int align = static_cast<int>(a.alignment);
  if (align < 0 || align > static_cast<int>(CausalAlignment::top_left)) {
    throw Error("alignment: not bottom_right or top_left");
  }
  const int backend = static_cast<int>(a.backend), cuda_path = static_cast<int>(a.cuda_path);
  if (backend < 0 || backend > static_cast<int>(Backend::cuda)) {
    throw Error(text::format("backend: unknown backend (code {}); use automatic, emulator or cuda", backend));
  }
  if (cuda_path < 0 || cuda_path > static_cast<int>(CudaPath::portable)) {
    throw Error(text::format("cuda_path: unknown path (code {}); use automatic or portable", cuda_path));
  }
  validate(a.policy);
  check_score_mods(a, p);
  return p;
}

std::string problem_text(const ProblemShape& p, ViewForm form) {
  if (form == ViewForm::packed) {
    return text::format("q [{}, {}, {}], k/v [{}, {}, {}]", p.seq_q, p.heads_q, p.dim, p.seq_kv, p.heads_kv,
                        p.dim);
  }
  return text::format("q [{}, {}, {}, {}], k/v [{}, {}, {}, {}]", p.batch, p.heads_q, p.seq_q, p.dim, p.batch,
                     p.heads_kv, p.seq_kv, p.dim);
}

double resolve_scale(const AttentionArgs& args, std::int64_t dim) {
  return args.scale ? *args.scale : 1.0 / std::sqrt(static_cast<double>(dim));
}

std::string ElementIndex::at(std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d) const {
  // (labelled: a caller's array may hold the axes in another order, BSHD or a cache's)
  if (form == ViewForm::packed) return text::format("[token, head, dim] = [{}, {}, {}]", first_token + s, h, d);
  return text::format("[b, h, s, d] = [{}, {}, {}, {}]", b, h, s, d);
}

void check_finite_host(const TensorView& t, const char* name, const ElementIndex& where) {
  // A dimension of stride 0 (a broadcast view) repeats its index 0: each element is read once, so a
  // key broadcast to 2^40 rows costs one row's check.
  const auto extent = [&](int i) { return t.stride[i] == 0 ? std::min<std::int64_t>(t.shape[i], 1) : t.shape[i]; };
  InterruptPoll interrupt;  // (millions of keys take a while to read, before any parallel loop)
  for (std::int64_t b = 0; b < extent(0); ++b)
    for (std::int64_t h = 0; h < extent(1); ++h)
      for (std::int64_t s = 0; s < extent(2); ++s) {
        if (s % kRowsPerPoll == 0) interrupt.poll();
        for (std::int64_t d = 0; d < extent(3); ++d) {
          if (!std::isfinite(load_as_float(t.data, t.dtype, t.offset(b, h, s, d)))) {
            throw Error(text::format("{}: non-finite value at {} (inputs must be finite; see docs/api.md)",
                                     name, where.at(b, h, s, d)));
          }
        }
      }
}

}  // namespace pasa
