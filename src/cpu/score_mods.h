// SPDX-License-Identifier: Apache-2.0
// What sits between the scores and the softmax, besides the policy's rounding: which keys a query
// sees (causal, sliding window, boolean mask, -inf in an additive mask), the logit softcap, and the
// additive mask's bias. Both CPU backends read these from here, so the reference and the emulator
// agree on the definitions; the emulator rounds the softcap's steps in its softmax format.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attention_checks.h"
#include "pasa/attention.h"
#include "storage_convert.h"

namespace pasa {

class ScoreMods {
 public:
  // A window wider than S_q + S_kv hides nothing more: clamped to it, origin +- the window cannot
  // overflow (a window of 2^63 - 1, "every key", wrapped and hid them all).
  ScoreMods(const AttentionArgs& args, const ProblemShape& ps)
      : args_(args), seq_q_(ps.seq_q), seq_kv_(ps.seq_kv),
        window_left_(std::min(args.window_left, ps.seq_q + ps.seq_kv)),
        window_right_(std::min(args.window_right, ps.seq_q + ps.seq_kv)) {}

  // Whether query `row` of (b, h) sees key `key`.
  bool visible(std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t key) const {
    if (!key_visible(args_.causal, args_.alignment, row, key, seq_q_, seq_kv_)) return false;
    if (window_left_ >= 0 || window_right_ >= 0) {
      const std::int64_t origin =
          args_.alignment == CausalAlignment::bottom_right ? row + seq_kv_ - seq_q_ : row;
      if (window_left_ >= 0 && key < origin - window_left_) return false;
      if (window_right_ >= 0 && key > origin + window_right_) return false;
    }
    return !mask_hides(b, h, row, key);
  }

  // Whether the attention mask alone (a boolean false, an additive -inf) hides key `key` from query
  // `row` of (b, h).
  bool mask_hides(std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t key) const {
    switch (args_.mask.kind) {
      case MaskKind::none: return false;
      case MaskKind::boolean:
        return static_cast<const std::uint8_t*>(args_.mask.data)[offset(b, h, row, key)] == 0;
      case MaskKind::additive:
        return mask_value(b, h, row, key) == -std::numeric_limits<double>::infinity();
    }
    return false;
  }

  bool has_bias() const { return args_.mask.kind == MaskKind::additive; }
  // The additive mask's value for a visible key (0 without one).
  double bias(std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t key) const {
    return has_bias() ? mask_value(b, h, row, key) : 0.0;
  }

  bool softcapped() const { return args_.softcap > 0.0; }
  // softcap * tanh(s / softcap), each step rounded by `round` (the identity for the reference).
  template <typename Round>
  double cap(double s, const Round& round) const {
    const double c = args_.softcap;
    return round(c * round(std::tanh(round(s / c))));
  }

 private:
  std::int64_t offset(std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t key) const {
    const MaskView& m = args_.mask;
    return (m.shape[0] == 1 ? 0 : b) * m.stride[0] + (m.shape[1] == 1 ? 0 : h) * m.stride[1] +
           row * m.stride[2] + key * m.stride[3];
  }
  double mask_value(std::int64_t b, std::int64_t h, std::int64_t row, std::int64_t key) const {
    return load_as_float(args_.mask.data, args_.mask.dtype, offset(b, h, row, key));
  }

  const AttentionArgs& args_;
  std::int64_t seq_q_, seq_kv_;
  std::int64_t window_left_, window_right_;  // -1: unbounded
};

}  // namespace pasa
