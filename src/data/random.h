// SPDX-License-Identifier: Apache-2.0
// The generators' random numbers, defined here rather than by the standard library (whose
// distributions are implementation-defined), so a seed names the same tensors on every platform.
//
//   state    xoshiro256** (Blackman and Vigna, 2018): 256 bits, seeded by expanding the 64-bit seed
//            with four outputs of splitmix64;
//   uniform  the top 53 bits of one output times 2^-53: a double in [0, 1);
//   normal   Box-Muller in double: u1 = 1 - uniform() in (0, 1], u2 = uniform(),
//            r = sqrt(-2 ln u1), returns r cos(2 pi u2), then r sin(2 pi u2) from the same pair;
//   index    below n: the high 64 bits of the 128-bit product of one output and n (Lemire);
//   shuffle  Fisher-Yates from the last element down, swapping i with index(i + 1).
// Everything but log, cos and sin is exact IEEE arithmetic; those three come from the C library,
// within an ulp of the true value on every mainstream one, which rounding to the tensors' fp32,
// fp16 or bf16 absorbs.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <utility>

namespace pasa {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) {
    for (std::uint64_t& word : s_) word = splitmix64(seed);
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  bool bernoulli(double p) { return uniform() < p; }

  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(angle);
    has_spare_ = true;
    return r * std::cos(angle);
  }
  double normal(double mean, double stddev) { return mean + stddev * normal(); }

  std::uint64_t index(std::uint64_t n) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }

  template <typename T>
  void shuffle(T* items, std::uint64_t n) {
    for (std::uint64_t i = n; i > 1; --i) std::swap(items[i - 1], items[index(i)]);
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  std::uint64_t s_[4];
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace pasa
