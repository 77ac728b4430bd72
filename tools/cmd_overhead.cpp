// SPDX-License-Identifier: Apache-2.0
// pasa overhead: the host's time per call of pasa::attention (eager) and of AttentionPlan::run, on
// the GPU (a decode step: the calls are queued without waiting, so the time is the host's) or on the
// CPU emulator (one query and one key by default, so the time is the call's fixed cost).
#include "text/format.h"

#include <memory>
#include <string>

#include "commands.h"
#include "cuda_backend.h"
#include "pasa/bench.h"
#include "pasa/error.h"
#include "pasa/policy.h"

namespace pasa::cli {
namespace {

struct OverheadOptions {
  std::string device = "auto", policy = "exact", dtype = "bf16";
  int batch = 1, heads_q = 32, heads_kv = 8, seq_kv = 4096, head_dim = 128, calls = 200;
};

void run(const OverheadOptions& o) {
  const bool gpu = o.device == "cuda" || (o.device == "auto" && cuda_backend_available());
  if (o.device != "auto" && o.device != "cuda" && o.device != "cpu") {
    throw Error("--device: '" + o.device + "' is not auto, cuda or cpu");
  }
  if (o.dtype != "bf16" && o.dtype != "fp16") throw Error("--dtype: '" + o.dtype + "' is not bf16 or fp16");
  BenchPoint pt;
  pt.policy = parse_policy(o.policy);
  pt.dtype = o.dtype == "bf16" ? DType::bf16 : DType::f16;
  pt.batch = o.batch;
  pt.heads_q = o.heads_q;
  pt.heads_kv = o.heads_kv;
  pt.seq_q = 1;
  pt.seq_kv = o.seq_kv;
  pt.head_dim = o.head_dim;
  if (!gpu && o.device == "auto") {  // the CPU default: the smallest problem, so only the fixed cost shows
    pt.heads_q = pt.heads_kv = 1;
    pt.seq_kv = 1;
    pt.head_dim = 8;
  }
  const HostOverhead h = bench_host_overhead(pt, gpu ? Device::cuda : Device::cpu, o.calls);
  text::print("host time per call ({}, policy {}, B {}, H {}/{}, S_q 1, S_kv {}, D {}; median of 15 rounds "
             "of {} calls)\n", gpu ? bench_device_description() : std::string("CPU emulator"),
             to_string(pt.policy), pt.batch, pt.heads_q, pt.heads_kv, pt.seq_kv, pt.head_dim, o.calls);
  text::print("| call | us |\n|---|---|\n| pasa::attention (eager) | {:.2f} |\n| AttentionPlan::run | {:.2f} |\n",
             h.eager_us, h.run_us);
  if (gpu) {
    text::print("| one empty kernel launch (the floor) | {:.2f} |\n", h.launch_us);
    if (h.dependent_launch_us > 0) {
      text::print("| one empty kernel launch, programmatic dependent | {:.2f} |\n", h.dependent_launch_us);
    }
  }
}

}  // namespace

void add_overhead_command(Command& app) {
  auto opt = std::make_shared<OverheadOptions>();
  Command* cmd = app.add_subcommand(
      "overhead", "Host time per call of pasa::attention and AttentionPlan::run: on the GPU a decode step "
                  "(calls queued without waiting), on the CPU the emulator's fixed cost (one query, one key).");
  cmd->add_option("--device", opt->device, "auto (the GPU when there is one), cuda or cpu")->capture_default_str();
  cmd->add_option("--policy", opt->policy, "policy text")->capture_default_str();
  cmd->add_option("--dtype", opt->dtype, "GPU input dtype: bf16 or fp16")->capture_default_str();
  cmd->add_option("--batch", opt->batch, "B")->capture_default_str();
  cmd->add_option("--heads-q", opt->heads_q, "query heads")->capture_default_str();
  cmd->add_option("--heads-kv", opt->heads_kv, "K/V heads")->capture_default_str();
  cmd->add_option("--seq-kv", opt->seq_kv, "keys")->capture_default_str();
  cmd->add_option("--head-dim", opt->head_dim, "head dim")->capture_default_str();
  cmd->add_option("--calls", opt->calls, "calls per timed round")->capture_default_str();
  cmd->callback([opt] { run(*opt); });
}

}  // namespace pasa::cli
