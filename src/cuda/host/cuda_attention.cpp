// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's dispatch in two steps. The plan checks what the kernels support (device, layout,
// dtypes, head dim, policy), each failure a pasa::Error naming the argument before anything is
// launched, and takes every host decision once: the path (the split-KV decode kernel for S_q <= 16
// with the exact or fdpp policies, the prefill kernels exact, pasa, sage8 otherwise), the decode split
// plan and its workspace size; device attributes are read once per device, and a policy's family is
// cached per thread. The run only fills the kernels' arguments and launches on the caller's stream.
// Eager calls (pasa::attention) plan, check the pointers' memory, and take the workspace from pasa's
// own stream-ordered pool (device_pool.h). No synchronization. The one exception:
// AttentionStats of an fdpp (unified max) call read the device's count of recomputed rows, which
// waits for the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "cuda/arch/cuda_check.h"
#include "cuda/host/decode_params.h"
#include "cuda/host/device_pool.h"
#include "cuda/host/kernel_params.h"
#include "cuda_backend.h"
#include "numerics/pasa_shift.h"
#include "pasa/error.h"
#include "pasa/format.h"
#include "pasa/policy.h"

namespace pasa {
namespace {

using cuda::check_cuda;
using cuda::ElemType;

ElemType elem_type(DType d) {
  switch (d) {
    case DType::f32: return ElemType::f32;
    case DType::f16: return ElemType::f16;
    case DType::bf16: return ElemType::bf16;
  }
  throw Error("unknown dtype");
}

// What the dispatch reads of a device, queried once per device for the life of the process.
struct DeviceInfo {
  int major, minor, sm_count, l2_bytes;
};

const DeviceInfo& device_info(int device) {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static DeviceInfo info[kMaxDevices];
  if (device < 0 || device >= kMaxDevices) {
    throw Error("CUDA device " + std::to_string(device) + ": pasa supports device ordinals below 64");
  }
  std::call_once(once[device], [device] {  // an exception leaves the flag unset: the next call retries
    DeviceInfo d{};
    check_cuda(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device),
               "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, device),
               "cudaDeviceGetAttribute(multiprocessor count)");
    check_cuda(cudaDeviceGetAttribute(&d.l2_bytes, cudaDevAttrL2CacheSize, device),
               "cudaDeviceGetAttribute(L2 cache size)");
    info[device] = d;
  });
  return info[device];
}

// The current device, which must be sm_90 (the kernels are compiled for sm_90a only).
int check_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  const DeviceInfo& d = device_info(device);
  if (d.major != 9 || d.minor != 0) {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    throw Error("CUDA device " + std::to_string(device) + " (" + prop.name + ") has compute capability " +
                std::to_string(d.major) + "." + std::to_string(d.minor) +
                "; the pasa kernels are built for sm_90 (H100 / H200) only");
  }
  return device;
}

// `ptr` must be device (or managed) memory of `device`, not a host pointer.
void check_device_pointer(const void* ptr, const char* name, int device) {
  cudaPointerAttributes attr{};
  const cudaError_t status = cudaPointerGetAttributes(&attr, ptr);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the non-sticky error
    throw Error(std::string(name) + ": cudaPointerGetAttributes failed (" + cudaGetErrorString(status) +
                "); pass device memory");
  }
  if (attr.type == cudaMemoryTypeManaged) return;
  if (attr.type != cudaMemoryTypeDevice) {
    throw Error(std::string(name) + ": pointer is host memory, not device memory (the tensor says "
                "Device::cuda; copy it to the GPU first)");
  }
  if (attr.device != device) {
    throw Error(std::string(name) + ": memory is on CUDA device " + std::to_string(attr.device) +
                " but the current device is " + std::to_string(device));
  }
}

// The kernels read and write whole 16-byte rows: head-dim stride 1, strides in whole 16 bytes (the
// plan checks), and 16-byte aligned data pointers (each call checks).
void check_layout(const TensorView& t, const char* name) {
  if (t.stride[3] != 1) {
    throw Error(std::string(name) + ": head-dim stride is " + std::to_string(t.stride[3]) +
                " (the CUDA kernels need stride[3] == 1, i.e. contiguous rows)");
  }
  const auto elem = static_cast<std::int64_t>(dtype_size(t.dtype));
  static const char* dims[] = {"batch", "heads", "sequence"};
  for (int i = 0; i < 3; ++i) {
    if ((t.stride[i] * elem) % 16 != 0) {
      throw Error(std::string(name) + ": stride of the " + dims[i] + " dimension (" +
                  std::to_string(t.stride[i]) + " elements) is not a multiple of 16 bytes (the CUDA "
                  "kernels need 16-byte aligned rows)");
    }
  }
}

void check_aligned(const void* data, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(data) % 16 != 0) {
    throw Error(std::string(name) + ": data pointer is not 16-byte aligned (the CUDA kernels need "
                "16-byte aligned rows)");
  }
}

std::string field_error(const char* field, const Format& got, const std::string& want) {
  return std::string("policy field '") + field + "': " + got.name() + " is not supported by the CUDA "
         "kernels (they need " + want + ")";
}

enum class Family { exact, pasa, fdpp, sage8 };

// `normalized` is the policy with every field the kernel lets vary set back to `preset`'s value: any
// field still printed by to_string (smoothing, quantizers, ... whatever the policy type grows) is one
// the kernel does not implement.
void reject_other_fields(Policy normalized, const std::string& preset, const char* kernel) {
  normalized.preset = preset;
  const std::string text = to_string(normalized);
  if (text != preset) {
    throw Error("policy fields '" + text.substr(preset.size() + 1) + "' are not supported by the CUDA " +
                kernel + " kernel (it implements the " + preset + " preset's other fields as they are)");
  }
}

// The fdpp preset's family: its formats (fp16 input, S and P; fp32 softmax, accumulators and O), any
// phi, window, splits and block sizes, and shift unified (FlashDecoding++) or none (the synchronized
// algorithm in the same formats, "fdpp,shift=none"). Returns false for a shift=none policy that is not
// fdpp-derived; throws naming the fields for an fdpp-derived one that differs elsewhere.
bool is_fdpp_family(const Policy& pol) {
  if (pol.shift != Shift::unified && !(pol.shift == Shift::none && pol.preset == "fdpp")) return false;
  const Policy preset = preset_policy("fdpp");
  Policy normalized = pol;
  normalized.shift = preset.shift;
  normalized.phi = preset.phi;
  normalized.window_lo = preset.window_lo;
  normalized.window_hi = preset.window_hi;
  normalized.splits = preset.splits;
  normalized.block_q = preset.block_q;
  normalized.block_kv = preset.block_kv;
  if (pol.shift == Shift::none) {
    normalized.preset = "fdpp";
    if (to_string(normalized) != "fdpp") return false;  // judged as an exact-family policy instead
  }
  reject_other_fields(normalized, "fdpp", "decode");
  return true;
}

// The sage8 preset (SageAttention2's 8-bit kernel): every field as the preset has it, any s1 (each
// row's state is its own); s2 must be the kernel's kSage8BlockKv = 128 (it sets K's quantization
// groups and the two-level PV accumulation). Returns false for any other policy (judged by the other families).
bool is_sage8(const Policy& pol) {
  const Policy preset = preset_policy("sage8");
  Policy normalized = pol;
  normalized.preset = "sage8";
  normalized.block_q = preset.block_q;
  normalized.block_kv = preset.block_kv;
  if (to_string(normalized) != "sage8") return false;
  if (pol.block_kv != cuda::kSage8BlockKv) {
    throw Error("policy field 's2': " + std::to_string(pol.block_kv) + " is not supported by the CUDA "
                "sage8 kernel (it quantizes K and accumulates P V in key blocks of s2 = " +
                std::to_string(cuda::kSage8BlockKv) + ")");
  }
  return true;
}

// The kernels implement four policy families: exact (fp32 scores and softmax; P rounded to the input
// dtype for the tensor cores; input and p may name that dtype or fp32; any s1, s2, splits), the pasa
// preset (any beta and s1; s2 = 128), the sage8 preset (is_sage8) and the fdpp preset
// (is_fdpp_family; decode shapes only).
// Everything else is an error naming the field.
Family classify_policy(const Policy& pol, DType in) {
  const Format in_fmt = in == DType::bf16 ? Format::bf16() : Format::fp16();
  const Format fp32 = Format::fp32();
  const Format fp16 = Format::fp16();
  if (is_fdpp_family(pol)) return Family::fdpp;
  if (is_sage8(pol)) return Family::sage8;
  if (pol.shift == Shift::none) {
    const std::string in_name = in_fmt.name();
    if (pol.input != fp32 && pol.input != in_fmt) {
      throw Error(field_error("input", pol.input, "fp32 or the tensors' dtype " + in_name));
    }
    if (pol.p != fp32 && pol.p != in_fmt) {
      throw Error(field_error("p", pol.p, "fp32 or the tensors' dtype " + in_name +
                                              "; P is rounded to it for the tensor cores"));
    }
    for (auto [field, f] : {std::pair{"qk_acc", pol.qk_acc}, {"s", pol.s}, {"softmax", pol.softmax},
                           {"pv_acc", pol.pv_acc}, {"o", pol.o}}) {
      if (f != fp32) throw Error(field_error(field, f, "fp32 without shift, i.e. the exact policy"));
    }
    if (pol.scale != ScalePlacement::scores) {
      throw Error("policy field 'scale': only s (scores) is supported by the CUDA exact kernel");
    }
    // s1 / s2 / splits only order fp32 roundings here: the kernels use their own tiles (the decode
    // path takes a policy's splits > 1 as its split count).
    const Policy preset = preset_policy("exact");
    Policy normalized = pol;
    normalized.input = normalized.p = fp32;
    normalized.block_q = preset.block_q;
    normalized.block_kv = preset.block_kv;
    normalized.splits = preset.splits;
    reject_other_fields(normalized, "exact", "exact");
    return Family::exact;
  }
  if (pol.shift != Shift::pasa) {
    throw Error("policy field 'shift': only none (exact), pasa and unified (fdpp) are supported by the "
                "CUDA kernels");
  }
  // shift == pasa: the pasa preset's formats, or pasa_accurate's (S' and the softmax state in fp32).
  const Format state = pol.s == fp32 && pol.softmax == fp32 ? fp32 : fp16;
  const std::pair<const char*, Format> want[] = {{"input", fp16}, {"qk_acc", fp32}, {"s", state},
                                                 {"softmax", state}, {"p", fp16}, {"pv_acc", fp32},
                                                 {"o", fp16}};
  const Format got[] = {pol.input, pol.qk_acc, pol.s, pol.softmax, pol.p, pol.pv_acc, pol.o};
  for (int i = 0; i < 7; ++i) {
    if (got[i] != want[i].second) {
      throw Error(field_error(want[i].first, got[i], want[i].second.name() + " with shift=pasa (the pasa or pasa_accurate preset)"));
    }
  }
  if (pol.scale != ScalePlacement::key) {
    throw Error("policy field 'scale': shift=pasa needs scale=k (alpha folded into M) on the CUDA kernels");
  }
  if (pol.block_kv != cuda::kPasaBlockKv) {
    throw Error("policy field 's2': " + std::to_string(pol.block_kv) + " is not supported by the CUDA "
                "pasa kernel (it shifts key blocks of s2 = " + std::to_string(cuda::kPasaBlockKv) + ")");
  }
  // Any beta and pseudo_avg; s1 does not change the result (each row's state is its own).
  const char* name = state == fp32 ? "pasa_accurate" : "pasa";
  const Policy preset = preset_policy(name);
  Policy normalized = pol;
  normalized.preset = name;
  normalized.beta = preset.beta;
  normalized.pseudo_avg = preset.pseudo_avg;  // both kinds of pseudo-average are implemented
  normalized.block_q = preset.block_q;
  reject_other_fields(normalized, name, "pasa");
  return Family::pasa;
}

// classify_policy's answer for the last policy and dtype this thread asked about: classifying
// compares policies through their text, too slow to repeat on every call of a decode loop.
Family classify_policy_cached(const Policy& pol, DType in) {
  struct Entry {
    Policy policy;
    DType in;
    Family family;
  };
  thread_local std::optional<Entry> last;
  if (!last || last->in != in || last->policy != pol) last = Entry{pol, in, classify_policy(pol, in)};
  return last->family;
}

cuda::Operand operand(const TensorView& t) { return {t.data, t.stride[0], t.stride[1], t.stride[2]}; }

void fill_stats(AttentionStats* stats, const ProblemShape& ps, long long recomputed) {
  if (stats == nullptr) return;
  stats->rows = ps.batch * ps.heads_q * ps.seq_q;
  stats->recomputed_rows = recomputed;
}

}  // namespace

// Every host decision for one problem shape: what the CUDA kernels were checked to support, the
// kernel family, the device, the decode split plan and PASA's M coefficients.
struct CudaPlan {
  ProblemShape shape;
  Family family;
  bool decode;
  int device;
  double alpha;
  cuda::DecodePlan decode_plan;
  float pasa_g, pasa_diag, pasa_off;  // pasa: M's fp16 entries (alpha folded in), their invariance G
  float pasa_mean_key_factor;         // pseudo_avg=k: M's row sum; 0 for pseudo_avg=s
  bool pasa_accurate;                 // pasa_accurate: S' and the softmax state in fp32
};

namespace {

CudaPlan make_plan(const AttentionArgs& args, const ProblemShape& ps) {
  if (args.q.device != Device::cuda) {
    throw Error("backend: the CUDA kernels need device tensors, but q is a host tensor (Device::cpu)");
  }
  if (args.lse.data != nullptr && args.lse.device != Device::cuda) {
    throw Error("lse: the CUDA kernels need a device LSE buffer, but lse is on the host");
  }
  // Shape, dtype and layout first (no CUDA calls needed), then the device.
  if (ps.dim != 64 && ps.dim != 128) {
    throw Error("q: head dim " + std::to_string(ps.dim) + " is not supported by the CUDA kernels "
                "(64 or 128)");
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
  constexpr std::int64_t kMaxSeq = std::int64_t{1} << 30;
  if (ps.seq_q > kMaxSeq || ps.seq_kv > kMaxSeq) {
    throw Error("q/k: sequence lengths above 2^30 are not supported by the CUDA kernels");
  }
  if (ps.batch > 65535 || ps.heads_q > 65535) {
    throw Error("q: batch and head counts above 65535 are not supported by the CUDA kernels");
  }
  CudaPlan plan{};
  plan.shape = ps;
  plan.family = classify_policy_cached(args.policy, in);
  plan.decode = (plan.family == Family::exact || plan.family == Family::fdpp) &&
                ps.seq_q <= cuda::kDecodeMaxSeqQ;
  if (plan.family == Family::fdpp && !plan.decode) {
    throw Error("policy '" + to_string(args.policy) + "': the fdpp policies (FlashDecoding++) run on the "
                "CUDA decode path only, which takes S_q <= " + std::to_string(cuda::kDecodeMaxSeqQ) +
                " (q has S_q = " + std::to_string(ps.seq_q) + ")");
  }
  plan.device = check_device();
  plan.alpha = resolve_scale(args, ps.dim);
  if (plan.decode) {
    const cuda::DecodeShape shape{static_cast<int>(ps.batch), static_cast<int>(ps.heads_kv),
                                  static_cast<int>(ps.group()), static_cast<int>(ps.seq_q),
                                  static_cast<int>(ps.seq_kv), static_cast<int>(ps.dim),
                                  plan.family == Family::fdpp && args.policy.shift == Shift::unified,
                                  args.policy.splits};
    plan.decode_plan = cuda::plan_decode(shape, device_info(plan.device).sm_count);
  }
  if (plan.family == Family::pasa) {
    const PasaShift shift = pasa_shift(args.policy.beta, cuda::kPasaBlockKv, plan.alpha, Format::fp16());
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

// Launches `plan` on args' tensors and stream: no allocation, no device query, no synchronization
// (except reading an fdpp call's recompute count for args.stats).
void run_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace) {
  for (const auto& [t, name] : {std::pair{&args.q, "q"}, {&args.k, "k"}, {&args.v, "v"}, {&args.o, "o"}}) {
    check_aligned(t->data, name);
  }
  if (reinterpret_cast<std::uintptr_t>(args.lse.data) % alignof(float) != 0) {
    throw Error("lse: data pointer is not 4-byte aligned");
  }
  const ProblemShape& ps = plan.shape;
  const double alpha = plan.alpha;
  const DType in = args.q.dtype;
  cuda::FwdParams p{};
  p.q = operand(args.q);
  p.k = operand(args.k);
  p.v = operand(args.v);
  p.o = args.o.data;
  p.o_stride_b = args.o.stride[0];
  p.o_stride_h = args.o.stride[1];
  p.o_stride_s = args.o.stride[2];
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
  // The exact kernel scales by |alpha| > 0 (the row max is taken on raw scores) and flips Q's sign
  // for a negative alpha; a zero alpha runs as 1e-30 (every visible key weighs the same either way).
  p.scale_log2 = std::max(static_cast<float>(std::fabs(alpha) * 1.4426950408889634), 1e-30f);
  p.negate_q = alpha < 0.0;
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
  call.sm_count = device_info(plan.device).sm_count;
  call.l2_bytes = device_info(plan.device).l2_bytes;
  call.alpha = alpha;

  if (plan.decode) {
    cuda::DecodeRequest r{};
    static_cast<cuda::KernelRequest&>(r) = call;
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
  if (plan.family == Family::exact) {
    // The Hopper engine, except for a negative alpha: only the mma.sync kernel flips Q as it loads it.
    if (p.negate_q) {
      cuda::launch_exact_fwd(p, batch, dim, elem_type(in), args.stream);
    } else {
      cuda::launch_exact_hopper_fwd(call, args.stream);
    }
    return;
  }
  if (plan.family == Family::sage8) {
    cuda::launch_sage8(call, args.stream);
    return;
  }
  cuda::PasaRequest r{};
  r.call = call;
  r.diag = plan.pasa_diag;
  r.off = plan.pasa_off;
  r.accurate = plan.pasa_accurate;
  r.mean_key_factor = plan.pasa_mean_key_factor;
  cuda::launch_pasa(r, args.stream);
}

}  // namespace

bool cuda_backend_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return false;
  }
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return major == 9 && minor == 0;
}

std::shared_ptr<const CudaPlan> plan_cuda_attention(const AttentionArgs& args, const ProblemShape& shape) {
  return std::make_shared<const CudaPlan>(make_plan(args, shape));
}

std::size_t cuda_plan_workspace_bytes(const CudaPlan& plan) {
  return plan.decode ? plan.decode_plan.workspace_bytes : 0;
}

void run_cuda_plan(const CudaPlan& plan, const AttentionArgs& args, void* workspace) {
  run_plan(plan, args, workspace);
}

void cuda_attention(const AttentionArgs& args, const ProblemShape& ps) {
  const CudaPlan plan = make_plan(args, ps);
  check_device_pointer(args.q.data, "q", plan.device);
  check_device_pointer(args.k.data, "k", plan.device);
  check_device_pointer(args.v.data, "v", plan.device);
  check_device_pointer(args.o.data, "o", plan.device);
  if (args.lse.data != nullptr) check_device_pointer(args.lse.data, "lse", plan.device);
  cuda::StreamBuffer workspace(cuda_plan_workspace_bytes(plan), plan.device,
                               static_cast<cudaStream_t>(args.stream));
  run_plan(plan, args, workspace.get());
}

}  // namespace pasa
