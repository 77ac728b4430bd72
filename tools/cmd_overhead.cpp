// SPDX-License-Identifier: Apache-2.0
// pasa overhead: the host's time per call of pasa::attention (eager) and of AttentionPlan::run, on
// the GPU (a decode step: the calls are queued without waiting, so the time is the host's) or on the
// CPU emulator (one query and one key by default, so the time is the call's fixed cost).
#include "text/format.h"

#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "cuda_backend.h"
#include "gpu_errors.h"
#include "pasa/bench.h"
#include "pasa/error.h"
#include "pasa/policy.h"
#include "policy_options.h"
#include "stage.h"

namespace pasa::cli {
namespace {

struct OverheadOptions {
  std::string device = "auto", policy = "exact";
  std::optional<std::string> dtype;  // the GPU's input dtype, bf16 unless given
  int batch = 1, calls = 200;
  // Unset: the device's default shape (kGpuShape or kCpuShape); set, the user's size on either device.
  std::optional<int> heads_q, heads_kv, seq_kv, head_dim;
};

// The default shapes: on the GPU a decode step, on the CPU one query and one key of head dim 8, so the
// emulator's arithmetic is nothing and the time is the call's fixed cost (the run takes well under a
// second; at the GPU's shape the emulator would take minutes).
struct Shape {
  int heads_q, heads_kv, seq_kv, head_dim;
};
constexpr Shape kGpuShape{32, 8, 4096, 128};
constexpr Shape kCpuShape{1, 1, 1, 8};

// 16 rounds of each way of calling (one warm-up, 15 timed): at 10000 calls a round, about 10 s on either device at the default
// shapes, and a median steady to a fraction of a percent; more only makes the run long.
constexpr int kMaxCalls = 10000;

// The CPU backends' largest head dim (pasa::attention refuses more).
constexpr int kCpuMaxHeadDim = 1024;

void run(const OverheadOptions& o) {
  if (o.device != "auto" && o.device != "cuda" && o.device != "cpu") {
    throw UsageError("--device: '" + o.device + "' is not auto, cuda or cpu");
  }
  const std::string dtype = o.dtype.value_or("bf16");
  if (dtype != "bf16" && dtype != "fp16") throw UsageError("--dtype: '" + dtype + "' is not bf16 or fp16");
  for (const auto& [option, size] : {std::pair<const char*, std::optional<int>>{"--batch", o.batch},
                                     {"--heads-q", o.heads_q}, {"--heads-kv", o.heads_kv},
                                     {"--seq-kv", o.seq_kv}, {"--head-dim", o.head_dim}}) {
    if (size && *size < 1) throw UsageError(text::format("{}: {} is not a size (at least 1)", option, *size));
  }
  if (o.calls < 1 || o.calls > kMaxCalls) {
    throw UsageError(text::format("--calls: {} is outside 1..{} (calls per timed round; 15 timed rounds each way)",
                                  o.calls, kMaxCalls));
  }
  const bool gpu = o.device == "cuda" || (o.device == "auto" && cuda_backend_available());
  if (o.dtype && !gpu) {
    throw UsageError(o.device == "auto"
                         ? "--dtype: applies to the GPU, and --device auto found no usable one (the CPU "
                           "emulator's calls, timed instead, take fp32)"
                         : "--dtype: applies to the GPU; the CPU emulator's calls take fp32");
  }
  const Shape& base = gpu ? kGpuShape : kCpuShape;
  const int heads_q = o.heads_q.value_or(base.heads_q), heads_kv = o.heads_kv.value_or(base.heads_kv);
  if (heads_q % heads_kv != 0) {
    throw UsageError(text::format("--heads-q/--heads-kv: {} K/V heads do not divide the {} query heads (GQA "
                                  "needs H_q to be a multiple of H_kv)", heads_kv, heads_q));
  }
  // The GPU kernels' head dims are theirs to refuse (they differ by policy and GPU); the emulator's
  // limit is one number.
  if (!gpu && o.head_dim && *o.head_dim > kCpuMaxHeadDim) {
    throw UsageError(text::format("--head-dim: {} is larger than the CPU emulator's {}", *o.head_dim,
                                  kCpuMaxHeadDim));
  }
  const std::string command = "pasa overhead --device " + o.device;
  BenchPoint pt;
  pt.policy = parse_policy_option("--policy", o.policy);
  pt.dtype = dtype == "bf16" ? DType::bf16 : DType::f16;
  pt.batch = o.batch;
  pt.heads_q = heads_q;
  pt.heads_kv = heads_kv;
  pt.seq_q = 1;
  pt.seq_kv = o.seq_kv.value_or(base.seq_kv);
  pt.head_dim = o.head_dim.value_or(base.head_dim);
  // Sizes given for the CPU can make this long: the stage says so every 30 s.
  // (Only the GPU's calls map a pasa::Error to a missing device: on the CPU it is bad input.)
  const HostOverhead h = run_stage("the timed calls", [&] {
    return gpu ? on_gpu(command, [&] { return bench_host_overhead(pt, Device::cuda, o.calls); })
               : bench_host_overhead(pt, Device::cpu, o.calls);
  });
  const std::string device = gpu ? on_gpu(command, [] { return bench_device_description(); }) : "CPU emulator";
  text::print("host time per call ({}, policy {}, B {}, H {}/{}, S_q 1, S_kv {}, D {}, {}; median of 15 rounds "
              "of {} calls)\n", device, to_string(pt.policy), pt.batch, pt.heads_q, pt.heads_kv, pt.seq_kv,
              pt.head_dim, gpu ? dtype : std::string("fp32"), o.calls);
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
  const auto sizes = [](const char* what, int gpu, int cpu) {
    return text::format("{} (default {} on the GPU, {} on the CPU)", what, gpu, cpu);
  };
  Command* cmd = app.add_subcommand(
      "overhead", "Host time per call of pasa::attention and AttentionPlan::run: on the GPU a decode step "
                  "(calls queued without waiting), on the CPU the emulator's fixed cost (by default one "
                  "query, one key, head dim 8: well under a second on idle cores; each call wakes the emulator's "
                  "threads, so busy cores slow it many times); given sizes apply on either device.");
  cmd->add_option("--device", opt->device, "auto (the GPU when there is one), cuda or cpu")->capture_default_str();
  cmd->add_option("--policy", opt->policy, "policy text")->capture_default_str();
  cmd->add_option("--dtype", opt->dtype, "GPU input dtype: bf16 or fp16; refused where the CPU emulator is timed (--device cpu, or auto without a usable GPU), which takes fp32 (default bf16)");
  cmd->add_option("--batch", opt->batch, "B")->capture_default_str();
  cmd->add_option("--heads-q", opt->heads_q, sizes("query heads", kGpuShape.heads_q, kCpuShape.heads_q));
  cmd->add_option("--heads-kv", opt->heads_kv, sizes("K/V heads", kGpuShape.heads_kv, kCpuShape.heads_kv));
  cmd->add_option("--seq-kv", opt->seq_kv, sizes("keys", kGpuShape.seq_kv, kCpuShape.seq_kv));
  cmd->add_option("--head-dim", opt->head_dim, sizes("head dim", kGpuShape.head_dim, kCpuShape.head_dim));
  cmd->add_option("--calls", opt->calls, text::format("calls per timed round, 1..{}", kMaxCalls))
      ->capture_default_str()
      ->range(text::format("must be in 1..{}", kMaxCalls));
  cmd->callback([opt] { run(*opt); });
}

}  // namespace pasa::cli
