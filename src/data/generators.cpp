// SPDX-License-Identifier: Apache-2.0
// Synthetic inputs. Each generator draws in fp64 from the project's own Rng (data/random.h: xoshiro256**
// and Box-Muller, not the standard library's implementation-defined distributions) seeded by the
// caller, so a (generator, parameters, seed) triple names the same tensors on every platform, and
// rounds to the requested dtype once.
#include "pasa/generators.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "data/random.h"
#include "memory_budget.h"
#include "pasa/error.h"
#include "storage_convert.h"
#include "text/format.h"

namespace pasa {
namespace {

HostTensor empty_tensor(const Shape4& s, DType dtype) {
  if (s.batch < 1 || s.heads < 1 || s.seq < 1 || s.dim < 1) {
    throw Error("generator: every dimension of the shape must be at least 1");
  }
  if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) > static_cast<int>(DType::bf16)) {
    throw Error("generator: unsupported dtype (code " + std::to_string(static_cast<int>(dtype)) +
                "); use f32, f16 or bf16");
  }
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  require_memory(saturating_product({u(s.batch), u(s.heads), u(s.seq), u(s.dim), dtype_size(dtype)}),
                 "generator: a [" + std::to_string(s.batch) + ", " + std::to_string(s.heads) + ", " +
                     std::to_string(s.seq) + ", " + std::to_string(s.dim) + "] " + dtype_name(dtype) + " tensor");
  HostTensor t{dtype, {s.batch, s.heads, s.seq, s.dim}, {}};
  t.bytes.resize(static_cast<std::size_t>(t.numel()) * dtype_size(dtype));
  return t;
}

template <typename Draw>
HostTensor fill(const Shape4& s, DType dtype, Draw&& draw) {
  HostTensor t = empty_tensor(s, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double x = draw(i);
    store_from_double(t.bytes.data(), dtype, i, x);
    // A NaN or infinite parameter, or values past the dtype's range, would give a tensor that no
    // attention call accepts: refused here, where the parameters can be named.
    if (!std::isfinite(load_as_float(t.bytes.data(), dtype, i))) {
      throw Error(text::format("generator: drew {:g}, which is not finite in {} (a parameter is NaN or "
                               "infinite, or draws values beyond the dtype's range)", x, dtype_name(dtype)));
    }
  }
  return t;
}

}  // namespace

QKV uniform_qkv(const Shape4& shape, double x0, double am, std::uint64_t seed, DType dtype) {
  if (!(am >= 0.0)) throw Error("uniform: amplitude must be non-negative");
  Rng rng(seed);
  auto draw = [&](std::int64_t) { return rng.uniform(x0 - am, x0 + am); };
  QKV out;
  out.q = fill(shape, dtype, draw);
  out.k = fill(shape, dtype, draw);
  out.v = fill(shape, dtype, draw);
  return out;
}

QKV hybrid_qkv(const Shape4& shape, double x0, double am, std::uint64_t seed, DType dtype, double p) {
  if (!(am >= 0.0)) throw Error("hybrid: amplitude must be non-negative");
  if (!(p >= 0.0 && p <= 1.0)) throw Error("hybrid: outlier probability must be in [0, 1]");
  Rng rng(seed);
  auto draw = [&](std::int64_t) {
    const double x = rng.normal(x0, 1.0);
    return rng.bernoulli(p) ? x + rng.normal(0.0, am) : x;
  };
  QKV out;
  out.q = fill(shape, dtype, draw);
  out.k = fill(shape, dtype, draw);
  out.v = fill(shape, dtype, draw);
  return out;
}

ResonanceParams resonance_preset(const std::string& name) {
  ResonanceParams p;
  if (name == "qwen2") return p;
  if (name == "svd") {
    // Every query out of phase, amplitudes of a few tens: uniformly large negative scores.
    p.q_amp = 34.0;
    p.k_amp = 34.0;
    p.q_bias = 1.0;
    p.k_bias = 4.0;
    p.in_phase = 0.0;
    return p;
  }
  throw Error("resonance: unknown preset '" + name + "' (qwen2, svd)");
}

QKV resonance_qkv(const Shape4& shape, const ResonanceParams& rp, std::uint64_t seed, DType dtype) {
  if (rp.period < 2) throw Error("resonance: period must be at least 2");
  if (!(rp.in_phase >= 0.0 && rp.in_phase <= 1.0)) throw Error("resonance: in_phase must be in [0, 1]");
  Rng rng(seed);
  auto noise = [&rng] { return rng.normal(); };
  auto in_phase = [&rng, &rp] { return rng.bernoulli(rp.in_phase); };
  const std::int64_t D = shape.dim;
  std::vector<double> wave(static_cast<std::size_t>(D)), q_bias(D), k_bias(D);
  for (std::int64_t d = 0; d < D; ++d) {
    wave[d] = std::cos(2.0 * std::numbers::pi * static_cast<double>(d) / rp.period);
    q_bias[d] = rp.q_bias * noise();
    k_bias[d] = rp.k_bias * noise();
  }
  QKV out;
  double amp = 0.0;
  out.q = fill(shape, dtype, [&](std::int64_t i) {
    const std::int64_t d = i % D;
    if (d == 0) amp = in_phase() ? rp.q_amp_in_phase : -rp.q_amp;  // one phase per query token
    return amp * wave[d] + q_bias[d] + noise();
  });
  out.k = fill(shape, dtype, [&](std::int64_t i) {
    const std::int64_t d = i % D;
    return rp.k_amp * wave[d] + k_bias[d] + rp.k_noise * noise();
  });
  out.v = fill(shape, dtype, [&](std::int64_t) { return noise(); });
  return out;
}

QKV outlier_qkv(const Shape4& shape, int channels, double magnitude, std::uint64_t seed, DType dtype) {
  if (channels < 0 || channels > shape.dim) throw Error("outliers: channel count outside 0..D");
  Rng rng(seed);
  auto noise = [&rng] { return rng.normal(); };
  const std::int64_t D = shape.dim;
  // Per channel: the offset Q and K carry there (0 for ordinary channels) and V's small bias.
  std::vector<double> q_off(static_cast<std::size_t>(D), 0.0), k_off(D, 0.0), v_bias(D);
  std::vector<std::int64_t> order(static_cast<std::size_t>(D));
  for (std::int64_t d = 0; d < D; ++d) order[d] = d;
  rng.shuffle(order.data(), order.size());
  for (int i = 0; i < channels; ++i) {
    const double sign = noise() < 0 ? -1.0 : 1.0;
    q_off[order[i]] = sign * magnitude * 0.5;
    k_off[order[i]] = sign * magnitude;
  }
  for (std::int64_t d = 0; d < D; ++d) v_bias[d] = 0.5 * noise();
  auto with_offsets = [&](const std::vector<double>& off) {
    return [&, off_ptr = &off](std::int64_t i) {
      const double o = (*off_ptr)[i % D];
      return o * (1.0 + 0.1 * noise()) + noise();
    };
  };
  QKV out;
  out.q = fill(shape, dtype, with_offsets(q_off));
  out.k = fill(shape, dtype, with_offsets(k_off));
  out.v = fill(shape, dtype, [&](std::int64_t i) { return v_bias[i % D] + noise(); });
  return out;
}

}  // namespace pasa
