// SPDX-License-Identifier: Apache-2.0
// Where a weight P, times the policy's p_scale, keeps its precision: it is carried in fp32, rounded to
// p, and held in p, pv_acc and o (and with rowsum=p in `softmax`, where a block's sum of the scaled P
// is rounded before it is divided by p_scale) until O~ is divided by p_scale. validate() refuses a
// p_scale that leaves P = 1 (the weight of a row's maximum) below one of them; the emulator asks the
// same of the smaller weights PASA takes in a block of large V (emulator.cpp).
#pragma once

#include <optional>

#include "pasa/format.h"
#include "pasa/policy.h"

namespace pasa {

struct ScaledPCarrier {
  const char* key;  // the policy field of the format: "p", "pv_acc", "o" or "softmax"
  Format format;
  double scaled;    // the weight times p_scale, as p holds it
  double smallest;  // the format's smallest normal value (1 for an integer format: its smallest nonzero)
};

// The first format that carries weight * p_scale below its smallest normal (integer: nonzero) value;
// none where every one keeps it.
std::optional<ScaledPCarrier> scaled_p_below_normal(const Policy& policy, double weight);

}  // namespace pasa
