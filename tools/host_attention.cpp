// SPDX-License-Identifier: Apache-2.0
#include "host_attention.h"

namespace pasa::cli {
namespace {

HostTensor f32_like(const HostTensor& q) {
  return HostTensor{DType::f32, q.shape, std::vector<std::uint8_t>(static_cast<std::size_t>(q.numel()) * 4)};
}

void apply(const CallOptions& call, AttentionArgs& args) {
  args.causal = call.causal;
  args.alignment = call.alignment;
  args.scale = call.scale;
}

}  // namespace

std::vector<double> attention_output(QKV& data, const Policy& policy, AttentionStats* stats,
                                     const CallOptions& call) {
  HostTensor o = f32_like(data.q);
  AttentionArgs args{data.q.view("q"), data.k.view("k"), data.v.view("v"), o.view("o")};
  apply(call, args);
  args.policy = policy;
  args.stats = stats;
  attention(args);
  const std::vector<float> f = to_float(o);
  return {f.begin(), f.end()};
}

std::vector<double> reference_output(QKV& data, const CallOptions& call) {
  HostTensor o = f32_like(data.q);
  AttentionArgs args{data.q.view("q"), data.k.view("k"), data.v.view("v"), o.view("o")};
  apply(call, args);
  return reference_attention(args).o;
}

}  // namespace pasa::cli
