// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's dispatch in two steps. The plan checks what the kernels support (device, layout,
// dtypes, head dim, policy), each failure a pasa::Error naming the argument before anything is
// launched, and takes every host decision once: the kernel, the decode split plan and its workspace
// size; device attributes are read once per device, and a policy's family is cached per thread. The
// run only fills the kernels' arguments and launches on the caller's stream.
//
// The kernel: a policy is classified into a family by its fields (exact, pasa, sage8, fdpp), then a
// table of kernel specs (kernel_specs.h) is tried in order, each saying whether it runs the family,
// shape and device, and why not; the first that accepts runs, and when none does the error lists
// every spec's reason. Two paths: on an sm_90 GPU in a build with sm_90a kernels, the Hopper kernels
// (wgmma, TMA: exact, pasa, sage8 at head dims 64 and 128); everywhere else, or when asked
// (AttentionArgs::cuda_path, PASA_CUDA_PATH=portable), the portable ones (sm_80 instructions: exact at
// head dims 64, 96, 128, 256; pasa at 64 and 128). The split-KV decode kernel (S_q <= 16, exact and
// fdpp, head dims 64, 96, 128, 256) is portable and serves both paths.
//
// Eager calls (pasa::attention) plan, check the pointers' memory, and take the workspace from pasa's
// own stream-ordered pool (device_pool.h). No synchronization. The one exception:
// AttentionStats of an fdpp (unified max) call read the device's count of recomputed rows, which
// waits for the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/decode_params.h"
#include "cuda/host/device_info.h"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda/host/kernel_specs.h"
#include "cuda/host/operand_checks.h"
#include "cuda/host/plan_on_cache.h"
#include "cuda/host/policy_family.h"
#include "cuda_backend.h"
#include "numerics/pasa_shift.h"
#include "pasa/error.h"
#include "pasa/format.h"
#include "pasa/policy.h"
#include "text/format.h"

// 1 when the build compiled the sm_90a kernels (a 90a entry in its CUDA architectures), else 0.
#ifndef PASA_HOPPER_KERNELS
#error "PASA_HOPPER_KERNELS must be defined (0 or 1): CMakeLists.txt sets it"
#endif

namespace pasa {
namespace {

using cuda::accepts_decode;
using cuda::Candidate;
using cuda::check_cuda;
using cuda::check_device;
using cuda::device_info;
using cuda::device_text;
using cuda::DeviceInfo;
using cuda::ElemType;
using cuda::hopper_refusal;
using cuda::Kernel;
using cuda::kernel_specs;
using cuda::KernelSpec;
using cuda::portable_path_from_env;
using cuda::refusal;

ElemType elem_type(DType d) {
  switch (d) {
    case DType::f32: return ElemType::f32;
    case DType::f16: return ElemType::f16;
    case DType::bf16: return ElemType::bf16;
  }
  throw Error("unknown dtype");
}

// The attention mask's fields of the kernel's arguments: its element type, its strides with 0 on a
// broadcast (size-1) axis, the factor its additive values take (the kernel adds them to raw scores,
// or to soft-capped ones, which are already scaled) and the floor they take scores to at most, from
// the base-2 scale the softmax multiplies them by.
void set_mask(cuda::FwdParams& p, const MaskView& m, double scale, float softmax_scale_log2) {
  if (m.kind == MaskKind::none) return;
  using cuda::MaskType;
  p.mask_type = m.kind == MaskKind::boolean ? MaskType::boolean
                : m.dtype == DType::f32     ? MaskType::add_f32
                : m.dtype == DType::f16     ? MaskType::add_f16
                                            : MaskType::add_bf16;
  const std::size_t elem = m.kind == MaskKind::boolean ? 1 : dtype_size(m.dtype);
  if (reinterpret_cast<std::uintptr_t>(m.data) % elem != 0) {
    throw Error("attn_mask: data pointer is not aligned to its element size");
  }
  p.mask = m.data;
  std::int64_t* strides[4] = {&p.mask_stride_b, &p.mask_stride_h, &p.mask_stride_s, &p.mask_stride_k};
  for (int i = 0; i < 4; ++i) *strides[i] = m.shape[i] == 1 ? 0 : m.stride[i];
  p.mask_scale = static_cast<float>(scale);
  p.mask_floor = std::max(-0x1p20f / softmax_scale_log2, -std::numeric_limits<float>::max());
}

cuda::Operand operand(const TensorView& t) {
  const std::array<std::int64_t, 4> s = canonical_strides(t);
  return {t.data, s[0], s[1], s[2]};
}

void fill_stats(AttentionStats* stats, const ProblemShape& ps, long long recomputed) {
  if (stats == nullptr) return;
  stats->rows = ps.batch * ps.heads_q * ps.seq_q;
  stats->recomputed_rows = recomputed;
}

}  // namespace

// Every host decision for one problem shape: what the CUDA kernels were checked to support, the
// kernel and its path, the device, the decode split plan and PASA's M coefficients.
struct CudaPlan {
  ProblemShape shape;
  DType in;  // q's dtype
  Family family;
  const KernelSpec* spec;
  bool portable;  // the portable path: the sm_90a kernels cannot run here (hopper_refusal)
  int device;
  double alpha;
  cuda::DecodePlan decode_plan;
  float pasa_g, pasa_diag, pasa_off;  // pasa: M's fp16 entries (alpha folded in), their invariance G
  float pasa_mean_key_factor;         // pseudo_avg=k: M's row sum; 0 for pseudo_avg=s
  bool pasa_accurate;                 // pasa_accurate: S' and the softmax state in fp32
  bool pasa_fp16_accumulator;         // pasa_fp16acc: P V in fp16 accumulators
};

void check_cuda_plan_launchable(const CudaPlan& plan, const AttentionArgs& args) {
  int current = -1;
  cuda::check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  if (current != plan.device) {
    throw Error(text::format("device: the plan was made on CUDA device {}, but the calling thread's current "
                             "device is {} (cudaSetDevice({}) first: kernels launch on the current device)",
                             plan.device, current, plan.device));
  }
  // (an error the caller's own earlier CUDA call left pending would otherwise be read by the launch
  // checks as a failure of pasa's kernels, after they were queued)
  static_cast<void>(cudaGetLastError());
  if (args.stats != nullptr && plan.family == Family::fdpp && args.policy.shift == Shift::unified) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t status = cudaStreamIsCapturing(static_cast<cudaStream_t>(args.stream), &capture);
    if (status != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
      static_cast<void>(cudaGetLastError());
      throw Error("stats: an fdpp call with shift=unified reads its recompute count back, which waits for "
                  "the stream, and a stream being captured into a CUDA graph cannot wait (pass no stats "
                  "while capturing)");
    }
  }
}

namespace {

// decode_only: the split-KV decode kernel is the only candidate (a KV cache's call).
CudaPlan make_plan(const AttentionArgs& args, const ProblemShape& ps, bool decode_only = false) {
  if (args.q.device != Device::cuda) {
    throw Error("backend: the CUDA kernels need device tensors, but q is a host tensor (Device::cpu)");
  }
  if (args.lse.data != nullptr && args.lse.device != Device::cuda) {
    throw Error("lse: the CUDA kernels need a device LSE buffer, but lse is on the host");
  }
  // Shape, dtype and layout first (no CUDA calls needed), then the device.
  if (std::find(std::begin(cuda::kPortableHeadDims), std::end(cuda::kPortableHeadDims), ps.dim) ==
      std::end(cuda::kPortableHeadDims)) {
    throw Error("q: head dim " + std::to_string(ps.dim) + " is not supported by the CUDA kernels "
                "(64, 96, 128 or 256; the sage8 kernel takes 64 or 128)");
  }
  const DType in = args.q.dtype;
  if (in != DType::f16 && in != DType::bf16) {
    throw Error("q: dtype " + dtype_name(in) + " is not supported by the CUDA kernels (f16 or bf16)");
  }
  if (args.k.dtype != in || args.v.dtype != in) {
    throw Error("k/v: dtypes " + dtype_name(args.k.dtype) + "/" + dtype_name(args.v.dtype) +
                " differ from q's " + dtype_name(in) + " (the CUDA kernels need one input dtype)");
  }
  check_layout(args.q, "q");
  check_layout(args.k, "k");
  check_layout(args.v, "v");
  check_layout(args.o, "o");
  if (ps.seq_q > cuda::kMaxSeq || ps.seq_kv > cuda::kMaxSeq) {
    throw Error("q/k: sequence lengths above 2^30 are not supported by the CUDA kernels");
  }
  if (ps.batch > 65535 || ps.heads_q > 65535) {
    throw Error("q: batch and head counts above 65535 are not supported by the CUDA kernels");
  }
  CudaPlan plan{};
  plan.shape = ps;
  plan.in = in;
  plan.family = classify_policy_cached(args.policy, in);
  plan.device = check_device();
  const DeviceInfo& info = device_info(plan.device);
  plan.alpha = resolve_scale(args, ps.dim);
  plan.pasa_fp16_accumulator = plan.family == Family::pasa && args.policy.pv_acc == Format::fp16();
  const Candidate candidate{plan.family, ps, plan.alpha, args.window_left >= 0 || args.window_right >= 0,
                            args.softcap > 0.0, args.mask.kind != MaskKind::none, plan.pasa_fp16_accumulator, info,
                            hopper_refusal(info, args.cuda_path == CudaPath::portable || portable_path_from_env())};
  plan.portable = !candidate.hopper_refusal.empty();
  std::string refusals;
  for (const KernelSpec& spec : kernel_specs()) {
    if (decode_only && spec.kernel != Kernel::decode) continue;
    const std::string why = refusal(spec, candidate);
    if (why.empty()) {
      plan.spec = &spec;
      break;
    }
    refusals += std::string("; ") + spec.name + ": " + why;
  }
  if (plan.spec == nullptr && decode_only) {  // (the decode kernel's own reason: no prefill kernel is an option)
    const std::string why = ps.seq_q > cuda::kDecodeMaxSeqQ  // (for fdpp, accepts_decode speaks of its prefill)
                                ? "takes S_q <= " + std::to_string(cuda::kDecodeMaxSeqQ) + " (q has S_q = " +
                                      std::to_string(ps.seq_q) + ")"
                                : accepts_decode(candidate);
    throw Error("attention_with_kvcache on the GPU runs the split-KV decode kernel, which does not run this "
                "call (S_q = " + std::to_string(ps.seq_q) + ", head dim " + std::to_string(ps.dim) + ", policy '" +
                to_string(args.policy) + "', " + device_text(plan.device, info) + "): " +
                (why.empty() ? "it has no sliding window, softcap or attention mask" : "it " + why));
  }
  if (plan.spec == nullptr) {
    throw Error("policy '" + to_string(args.policy) + "' (family " + family_name(plan.family) + ") on " +
                device_text(plan.device, info) + ", " + (plan.portable ? "portable" : "sm_90a") +
                " path: no CUDA kernel runs it" + refusals);
  }
  if (plan.spec->kernel == Kernel::decode) {
    const cuda::DecodeShape shape{static_cast<int>(ps.batch), static_cast<int>(ps.heads_kv),
                                  static_cast<int>(ps.group()), static_cast<int>(ps.seq_q),
                                  static_cast<int>(ps.seq_kv), static_cast<int>(ps.dim),
                                  plan.family == Family::fdpp && args.policy.shift == Shift::unified,
                                  args.policy.splits};
    plan.decode_plan = cuda::plan_decode(shape, info.sm_count, info.max_smem);
  }
  if (plan.family == Family::pasa) {
    // A beta or scale whose stored M is singular (or past it) is refused as the emulator refuses it:
    // the kernels would return NaN.
    const PasaShift shift =
        check_pasa_shift(args.policy.beta, cuda::kPasaBlockKv, plan.alpha * score_unit(args.policy), Format::fp16());
    plan.pasa_g = static_cast<float>(shift.invariance);
    plan.pasa_diag = static_cast<float>(shift.diag);
    plan.pasa_off = static_cast<float>(shift.off);
    plan.pasa_accurate = args.policy.softmax == Format::fp32();
    plan.pasa_mean_key_factor = args.policy.pseudo_avg == PseudoAverage::keys
                                    ? static_cast<float>(shift.diag + (cuda::kPasaBlockKv - 1) * shift.off)
                                    : 0.0f;
  }
  return plan;
}

}  // namespace

void cuda_check_aligned_operands(const AttentionArgs& args) {
  for (const auto& [t, name] : {std::pair{&args.q, "q"}, {&args.k, "k"}, {&args.v, "v"}, {&args.o, "o"}}) {
    check_aligned(t->data, name);
  }
  check_lse_aligned(args.lse.data);
}

namespace {

// Launches `plan` on args' tensors and stream: no allocation, no device query, no synchronization
// (except reading an fdpp call's recompute count for args.stats). A decode plan reads its keys from
// `cache` (default: args.k and args.v as they are). Each entry point checks check_cuda_plan_launchable
// first, once: before its pooled workspace where it has one.
void run_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace,
              const cuda::KvCacheRead& cache = {}) {
  cuda_check_aligned_operands(args);
  const ProblemShape& ps = plan.shape;
  const double alpha = plan.alpha;
  const DType in = args.q.dtype;
  cuda::FwdParams p{};
  p.q = operand(args.q);
  p.k = operand(args.k);
  p.v = operand(args.v);
  if (cache.max_blocks > 0) {
    // A paged cache's batch stride steps a block. The view spans B sequences of a capacity each
    // (cuda_kvcache.cpp's over_capacity), so at B = 1 operand() would derive the stride from the
    // other dimensions; the caller's canonical strides, taken on the cache's real shape, hold it.
    p.k.stride_b = args.k.stride[0];
    p.v.stride_b = args.v.stride[0];
  }
  const cuda::Operand o = operand(args.o);
  p.o = args.o.data;
  p.o_stride_b = o.stride_b;
  p.o_stride_h = o.stride_h;
  p.o_stride_s = o.stride_s;
  p.o_type = elem_type(args.o.dtype);
  p.lse = args.lse.data;
  p.lse_stride_b = args.lse.stride[0];
  p.lse_stride_h = args.lse.stride[1];
  p.lse_stride_s = args.lse.stride[2];
  p.seq_q = static_cast<int>(ps.seq_q);
  p.seq_kv = static_cast<int>(ps.seq_kv);
  p.heads_q = static_cast<int>(ps.heads_q);
  p.group = static_cast<int>(ps.group());
  p.causal = args.causal;
  p.causal_offset =
      args.alignment == CausalAlignment::bottom_right ? static_cast<int>(ps.seq_kv - ps.seq_q) : 0;
  // A window side that reaches past every key of every row is unbounded (-1): the left one from
  // the last row's diagonal, the right one from the first row's. The kernels' row bounds
  // (fwd_mask.cuh: row + offset + window + 1) then stay below S_q + S_kv <= 2^31 in their ints.
  const std::int64_t offset = p.causal_offset;
  auto window_side = [&](std::int64_t w, std::int64_t unbounded_from) {
    return w < 0 || w >= unbounded_from ? -1 : static_cast<int>(w);
  };
  p.window_left = window_side(args.window_left, ps.seq_q - 1 + offset);
  p.window_right = window_side(args.window_right, ps.seq_kv - 1 - offset);
  // The exact kernels scale by |alpha| > 0 (the row max is taken on raw scores) and flip Q's sign
  // for a negative alpha; a zero alpha runs as 1e-30 (every visible key weighs the same either way).
  constexpr double kLog2e = 1.4426950408889634;
  p.scale_log2 = std::max(static_cast<float>(std::fabs(alpha) * kLog2e), 1e-30f);
  p.negate_q = alpha < 0.0;
  p.softcap = static_cast<float>(args.softcap);
  p.softcap_scale = args.softcap > 0.0 ? static_cast<float>(std::fabs(alpha) / args.softcap) : 0.0f;
  // (an additive mask meets raw scores at the scale the kernel runs, 1e-30 for a zero alpha included)
  set_mask(p, args.mask, args.softcap > 0.0 ? 1.0 : kLog2e / p.scale_log2,
           args.softcap > 0.0 ? static_cast<float>(kLog2e) : p.scale_log2);
  p.pasa_g = plan.pasa_g;
  const int batch = static_cast<int>(ps.batch);
  const int dim = static_cast<int>(ps.dim);

  cuda::KernelRequest call{};
  call.fwd = p;
  call.batch = batch;
  call.heads_kv = static_cast<int>(ps.heads_kv);
  call.head_dim = dim;
  call.in_type = elem_type(in);
  call.device = plan.device;
  const DeviceInfo& info = device_info(plan.device);
  call.sm_count = info.sm_count;
  call.l2_bytes = info.l2_bytes;
  call.alpha = alpha;
  // Every kernel has sm_90a code in a build with 90a (the portable ones too), and an sm_90 device runs
  // that code: its griddepcontrol instructions make dependent launches safe there. Stream capture
  // keeps them in CUDA graphs from 12.4 on.
  call.dependent_launch = PASA_HOPPER_KERNELS == 1 && CUDART_VERSION >= 12040 && info.major == 9 && info.minor == 0;
  call.tile_tickets = static_cast<std::uint64_t*>(workspace);

  const Kernel kernel = plan.spec->kernel;
  if (kernel == Kernel::decode) {
    cuda::DecodeRequest r{};
    static_cast<cuda::KernelRequest&>(r) = call;
    r.cache = cache;
    r.fdpp_formats = plan.family == Family::fdpp;
    r.unified = plan.family == Family::fdpp && args.policy.shift == Shift::unified;
    r.phi = args.policy.phi;
    r.window_lo = args.policy.window_lo;
    r.window_hi = args.policy.window_hi;
    const long long recomputed =
        cuda::run_decode(plan.decode_plan, r, workspace, args.stats != nullptr && r.unified, args.stream);
    fill_stats(args.stats, ps, recomputed);
    return;
  }
  fill_stats(args.stats, ps, 0);
  switch (kernel) {
    case Kernel::decode: break;
    case Kernel::exact_portable:
      cuda::launch_exact_portable_fwd(p, batch, dim, elem_type(in), args.stream);
      break;
    case Kernel::exact_hopper:
      cuda::launch_exact_fwd(call, args.stream);
      break;
    case Kernel::sage8_hopper: {
      cuda::Sage8Request r{};
      static_cast<cuda::KernelRequest&>(r) = call;
      r.qk_codes = args.policy.q_quant == Format::e4m3() ? cuda::QkCodes::e4m3 : cuda::QkCodes::int8;
      cuda::launch_sage8(r, args.stream);
      break;
    }
    case Kernel::pasa_hopper:
    case Kernel::pasa_portable: {
      cuda::PasaRequest r{};
      r.call = call;
      r.diag = plan.pasa_diag;
      r.off = plan.pasa_off;
      r.accurate = plan.pasa_accurate;
      r.fp16_accumulator = plan.pasa_fp16_accumulator;
      r.mean_key_factor = plan.pasa_mean_key_factor;
      kernel == Kernel::pasa_hopper ? cuda::launch_pasa(r, args.stream) : cuda::launch_pasa_portable(r, args.stream);
      break;
    }
  }
}

}  // namespace

bool cuda_backend_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return false;
  }
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major >= 8;
}

bool cuda_hopper_path_available() {
  if (!cuda_backend_available()) return false;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return hopper_refusal(device_info(device), portable_path_from_env()).empty();
}

bool cuda_runs_score_mods(const Policy& policy, DType in) {
  try {
    return classify_policy_cached(policy, in) == Family::exact;
  } catch (const Error&) {  // (a policy no kernel runs)
    return false;
  }
}

CudaPlanChoice cuda_plan_choice(const CudaPlan& plan) {
  return {plan.portable ? CudaKernelPath::portable : CudaKernelPath::hopper, plan.spec->name};
}

std::shared_ptr<const CudaPlan> plan_cuda_attention(const AttentionArgs& args, const ProblemShape& shape) {
  return std::make_shared<const CudaPlan>(make_plan(args, shape));
}

std::size_t cuda_plan_workspace_bytes(const CudaPlan& plan) {
  switch (plan.spec->kernel) {
    case Kernel::decode: return plan.decode_plan.workspace_bytes;
    case Kernel::exact_hopper:
    case Kernel::pasa_hopper:
    case Kernel::sage8_hopper: return cuda::kTileTicketBytes;
    case Kernel::exact_portable:
    case Kernel::pasa_portable: return 0;
  }
  return 0;
}

namespace {

// What a run of the plan takes from pasa's pool beside its workspace: the prepass scratch of pasa and
// sage8 (kernel_params.h).
std::size_t kernel_scratch_bytes(const CudaPlan& plan) {
  cuda::KernelRequest c{};
  c.batch = static_cast<int>(plan.shape.batch);
  c.heads_kv = static_cast<int>(plan.shape.heads_kv);
  c.head_dim = static_cast<int>(plan.shape.dim);
  c.in_type = elem_type(plan.in);
  c.fwd.seq_q = static_cast<int>(plan.shape.seq_q);
  c.fwd.seq_kv = static_cast<int>(plan.shape.seq_kv);
  switch (plan.spec->kernel) {
    case Kernel::pasa_hopper: return cuda::pasa_scratch_bytes(c, true);
    case Kernel::pasa_portable: return cuda::pasa_scratch_bytes(c, false);
    case Kernel::sage8_hopper: {
      cuda::Sage8Request r{};
      static_cast<cuda::KernelRequest&>(r) = c;
      return cuda::sage8_scratch_bytes(r);
    }
    case Kernel::decode:
    case Kernel::exact_hopper:
    case Kernel::exact_portable: return 0;
  }
  return 0;
}

}  // namespace

void cuda_reserve_scratch(const std::vector<std::shared_ptr<const CudaPlan>>& plans, void* stream) {
  std::size_t workspace = 0, scratch = 0;
  int device = -1;
  for (const auto& plan : plans) {
    if (plan == nullptr) continue;
    workspace = std::max(workspace, cuda_plan_workspace_bytes(*plan));
    scratch = std::max(scratch, kernel_scratch_bytes(*plan));
    device = plan->device;
  }
  if (device < 0) return;
  // Taken as a run takes them (its workspace, then its scratch) and handed back at once: the pool
  // keeps freed memory (device_pool.cpp), and later allocations on the stream reuse it.
  const auto s = static_cast<cudaStream_t>(stream);
  const cuda::StreamBuffer reserved_workspace(workspace, device, s);
  const cuda::StreamBuffer reserved_scratch(scratch, device, s);
}

void run_cuda_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace) {
  check_cuda_plan_launchable(plan, args);
  run_plan(plan, args, workspace);
}

std::shared_ptr<const CudaPlan> plan_cuda_decode(const AttentionArgs& args, const ProblemShape& shape) {
  return std::make_shared<const CudaPlan>(make_plan(args, shape, true));
}

int cuda_plan_device(const CudaPlan& plan) { return plan.device; }

void run_cuda_decode_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace,
                          const cuda::KvCacheRead& cache) {
  run_plan(plan, args, workspace, cache);
}

void cuda_attention(const AttentionArgs& args, const ProblemShape& ps) {
  const CudaPlan plan = make_plan(args, ps);
  check_device_pointer(args.q.data, "q", plan.device);
  check_device_pointer(args.k.data, "k", plan.device);
  check_device_pointer(args.v.data, "v", plan.device);
  check_device_pointer(args.o.data, "o", plan.device);
  if (args.lse.data != nullptr) check_device_pointer(args.lse.data, "lse", plan.device);
  if (args.mask.kind != MaskKind::none) check_device_pointer(args.mask.data, "attn_mask", plan.device);
  run_cuda_plan_pooled(plan, args);
}

void run_cuda_plan_pooled(const CudaPlan& plan, const AttentionArgs& args) {
  check_cuda_plan_launchable(plan, args);  // (before the pool's allocation, a node of a capture)
  cuda::StreamBuffer workspace(cuda_plan_workspace_bytes(plan), plan.device,
                               static_cast<cudaStream_t>(args.stream));
  run_plan(plan, args, workspace.get());
}

}  // namespace pasa
