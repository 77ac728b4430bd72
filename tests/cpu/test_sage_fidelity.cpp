// SPDX-License-Identifier: Apache-2.0
// The SageAttention2 report's own choices as policy options: P against the running maximum
// (p_max=running) must equal the one-accumulator form's P (two_level=0 takes P against the running
// maximum by construction) where the accumulators agree, and must differ from the block-maximum P.
#include <gtest/gtest.h>

#include "pasa/attention.h"
#include "pasa/generators.h"
#include "pasa/policy.h"
#include "test_util.h"

namespace pasa {
namespace {

std::vector<double> run(QKV& data, const std::string& policy) {
  HostTensor o{DType::f32, data.q.shape, std::vector<std::uint8_t>(data.q.bytes.size() * 2)};
  AttentionArgs args{data.q.view("q"), data.k.view("k"), data.v.view("v"), o.view("o")};
  args.policy = parse_policy(policy);
  attention(args);
  return test::read_bhsd(args.o);
}

TEST(SageFidelity, RunningMaximumPIsTheOneAccumulatorsP) {
  // With pv_acc = o = fp32 and exact P, V (no quantizer), two-level accumulation with P against the
  // running maximum and one accumulator differ only by the order of fp32 additions; the block-maximum
  // P rounds differently in e4m3 (its values sit higher in the format's range).
  QKV data = hybrid_qkv({1, 2, 300, 64}, 0.0, 0.0, 41);
  const std::string base = "exact,p=e4m3,p_scale=448,s2=64";
  const std::vector<double> running = run(data, base + ",p_max=running");
  const std::vector<double> single = run(data, base + ",two_level=0");
  const std::vector<double> block = run(data, base);
  const ReferenceResult ref = [&] {
    HostTensor o{DType::f32, data.q.shape, std::vector<std::uint8_t>(data.q.bytes.size() * 2)};
    AttentionArgs args{data.q.view("q"), data.k.view("k"), data.v.view("v"), o.view("o")};
    return reference_attention(args);
  }();
  // fp32 sums of at most 300 terms: relative differences of order 300 * 2^-24.
  EXPECT_LT(test::relative_rmse(running, single), 300 * 6e-8);
  EXPECT_GT(test::relative_rmse(running, block), 1e-4);  // e4m3 P: u = 2^-4, so P differs visibly
  // Both stay within e4m3's rounding of P (u = 1/16, averaged over many keys) of the reference.
  EXPECT_LT(test::relative_rmse(running, ref.o), 1.0 / 16);
  EXPECT_LT(test::relative_rmse(block, ref.o), 1.0 / 16);
}

}  // namespace
}  // namespace pasa
