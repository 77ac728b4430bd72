// SPDX-License-Identifier: Apache-2.0
// Exact merge of two partial attention results over disjoint key sets (algorithms.md section 1):
//   LSE = log(exp(LSE_a) + exp(LSE_b)),  O = exp(LSE_a - LSE) O_a + exp(LSE_b - LSE) O_b.
#include <cmath>
#include <initializer_list>
#include <limits>
#include <utility>

#include "attention_checks.h"
#include "memory_overlap.h"
#include "pasa/attention.h"
#include "pasa/error.h"
#include "storage_convert.h"
#include "text/format.h"

namespace pasa {
namespace {

float& lse_at(const LseView& l, std::int64_t b, std::int64_t h, std::int64_t s) {
  return l.data[b * l.stride[0] + h * l.stride[1] + s * l.stride[2]];
}

// An output and its LSE, checked as pasa::attention checks its tensors (outputs: positive strides, a
// distinct element per index).
void check_partial(const TensorView& o, const LseView& lse, const TensorView& like, const char* o_name,
                   const char* lse_name, bool is_output) {
  check_view(o, o_name, is_output);
  if (lse.data == nullptr) throw Error(text::format("{}: data pointer is null", lse_name));
  if (o.device != Device::cpu || lse.device != Device::cpu) {
    throw Error(text::format("{}: merge_partials runs on the CPU and needs host tensors", o_name));
  }
  if (o.shape != like.shape) throw Error(text::format("{}: shape differs from o_a's", o_name));
  if (lse.shape != std::array<std::int64_t, 3>{o.shape[0], o.shape[1], o.shape[2]}) {
    throw Error(text::format("{}: shape is not [B, H, S] of {}", lse_name, o_name));
  }
  for (int i = 0; i < 3; ++i) {
    if (lse.stride[i] < (is_output ? 1 : 0) && lse.shape[i] != 1) {  // (a size-1 dimension's is never read)
      throw Error(text::format("{}: stride {} is {} (must be {})", lse_name, i, lse.stride[i],
                               is_output ? "positive" : "non-negative"));
    }
  }
  check_reach(memory_of(lse), lse_name);
  if (is_output) {
    check_no_self_overlap(memory_of(o), o_name);
    check_no_self_overlap(memory_of(lse), lse_name);
  }
}

// An output may be one of the inputs itself (the merge reads each element before it writes it) but
// must otherwise stay apart from every input and the other output: a shifted or reshaped alias would
// be written before it is read.
void check_merge_output(const StridedMemory& out, const char* name, std::initializer_list<NamedMemory> others) {
  for (const NamedMemory& other : others) {
    const bool same_view = out.data == other.memory.data && same_layout(out, other.memory);
    if (!same_view) check_apart(out, name, other.memory, other.name);
  }
}

}  // namespace

void merge_partials(const TensorView& o_a, const LseView& lse_a, const TensorView& o_b,
                    const LseView& lse_b, const TensorView& o, const LseView& lse) {
  check_partial(o_a, lse_a, o_a, "o_a", "lse_a", false);
  check_partial(o_b, lse_b, o_a, "o_b", "lse_b", false);
  check_partial(o, lse, o_a, "o", "lse", true);
  const StridedMemory oa = memory_of(o_a), ob = memory_of(o_b), la = memory_of(lse_a), lb = memory_of(lse_b);
  check_merge_output(memory_of(o), "o", {{oa, "o_a"}, {ob, "o_b"}, {la, "lse_a"}, {lb, "lse_b"}, {memory_of(lse), "lse"}});
  check_merge_output(memory_of(lse), "lse", {{oa, "o_a"}, {ob, "o_b"}, {la, "lse_a"}, {lb, "lse_b"}});
  const auto [B, H, S, D] = o_a.shape;
  // An LSE is finite, or -inf for a row that saw no key: anything else (NaN, +inf) is no partial's.
  for (const auto& [lse_in, name] : {std::pair{&lse_a, "lse_a"}, {&lse_b, "lse_b"}}) {
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t s = 0; s < S; ++s) {
          const double x = lse_at(*lse_in, b, h, s);
          if (std::isnan(x) || x == std::numeric_limits<double>::infinity()) {
            throw Error(text::format("{}: {} at [{}, {}, {}] is not a log-sum-exp (finite, or -inf for a row "
                                    "without keys)", name, x, b, h, s));
          }
        }
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t s = 0; s < S; ++s) {
        const double la = lse_at(lse_a, b, h, s), lb = lse_at(lse_b, b, h, s);
        const double hi = std::max(la, lb);
        if (hi == -std::numeric_limits<double>::infinity()) {  // no key in either part
          for (std::int64_t d = 0; d < D; ++d) store_from_double(o.data, o.dtype, o.offset(b, h, s, d), 0.0);
          lse_at(lse, b, h, s) = static_cast<float>(hi);
          continue;
        }
        // Stable log-sum-exp: factor out the larger term so neither exponential overflows. The weights
        // come from the shifted terms, not from exp(lse - merged): at |LSE| past about 1e9, adding
        // log(1 + ...) to hi is lost to the double's rounding, which made equal parts weigh 1 and 1.
        const double ea = std::exp(la - hi), eb = std::exp(lb - hi);
        const double merged = hi + std::log(ea + eb);
        const double wa = ea / (ea + eb), wb = eb / (ea + eb);
        for (std::int64_t d = 0; d < D; ++d) {
          const double va = load_as_float(o_a.data, o_a.dtype, o_a.offset(b, h, s, d));
          const double vb = load_as_float(o_b.data, o_b.dtype, o_b.offset(b, h, s, d));
          // (a part whose weight is 0, no keys or negligible, adds 0 whatever its O holds: 0 * NaN would not)
          const double sum = (wa == 0.0 ? 0.0 : wa * va) + (wb == 0.0 ? 0.0 : wb * vb);
          store_from_double(o.data, o.dtype, o.offset(b, h, s, d), sum);
        }
        lse_at(lse, b, h, s) = static_cast<float>(merged);
      }
}

}  // namespace pasa
