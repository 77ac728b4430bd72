// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's dispatch: checks what the kernels support (device, pointers, layout, dtypes,
// head dim, policy), each failure a pasa::Error naming the argument before anything is launched;
// then picks the path and launches on the caller's stream: the split-KV decode kernel for S_q <= 16
// with the exact or fdpp policies, the prefill kernels (exact, pasa, sage8) otherwise. No synchronization:
// scratch buffers come from pasa's own stream-ordered pool (device_pool.h). The one exception:
// AttentionStats of an fdpp (unified max) call read the device's count of recomputed rows, which
// waits for the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/decode_params.h"
#include "cuda/kernel_params.h"
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

// The device the work runs on must be sm_90 (the kernels are compiled for sm_90a only).
int check_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "cudaDeviceGetAttribute");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
             "cudaDeviceGetAttribute");
  if (major != 9 || minor != 0) {
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    throw Error("CUDA device " + std::to_string(device) + " (" + prop.name + ") has compute capability " +
                std::to_string(major) + "." + std::to_string(minor) +
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

// The kernels read and write whole 16-byte rows: head-dim stride 1, 16-byte aligned rows.
void check_layout(const TensorView& t, const char* name) {
  if (t.stride[3] != 1) {
    throw Error(std::string(name) + ": head-dim stride is " + std::to_string(t.stride[3]) +
                " (the CUDA kernels need stride[3] == 1, i.e. contiguous rows)");
  }
  const auto elem = static_cast<std::int64_t>(dtype_size(t.dtype));
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) {
    throw Error(std::string(name) + ": data pointer is not 16-byte aligned (the CUDA kernels need "
                "16-byte aligned rows)");
  }
  static const char* dims[] = {"batch", "heads", "sequence"};
  for (int i = 0; i < 3; ++i) {
    if ((t.stride[i] * elem) % 16 != 0) {
      throw Error(std::string(name) + ": stride of the " + dims[i] + " dimension (" +
                  std::to_string(t.stride[i]) + " elements) is not a multiple of 16 bytes (the CUDA "
                  "kernels need 16-byte aligned rows)");
    }
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

cuda::Operand operand(const TensorView& t) { return {t.data, t.stride[0], t.stride[1], t.stride[2]}; }

void fill_stats(AttentionStats* stats, const ProblemShape& ps, long long recomputed) {
  if (stats == nullptr) return;
  stats->rows = ps.batch * ps.heads_q * ps.seq_q;
  stats->recomputed_rows = recomputed;
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

void cuda_attention(const AttentionArgs& args, const ProblemShape& ps) {
  if (args.q.device != Device::cuda) {
    throw Error("backend: the CUDA kernels need device tensors, but q is a host tensor (Device::cpu)");
  }
  if (args.lse.data != nullptr && args.lse.device != Device::cuda) {
    throw Error("lse: the CUDA kernels need a device LSE buffer, but lse is on the host");
  }
  // Shape, dtype and layout first (no CUDA calls needed), then the device and the pointers.
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
  if (reinterpret_cast<std::uintptr_t>(args.lse.data) % alignof(float) != 0) {
    throw Error("lse: data pointer is not 4-byte aligned");
  }
  constexpr std::int64_t kMaxSeq = std::int64_t{1} << 30;
  if (ps.seq_q > kMaxSeq || ps.seq_kv > kMaxSeq) {
    throw Error("q/k: sequence lengths above 2^30 are not supported by the CUDA kernels");
  }
  if (ps.batch > 65535 || ps.heads_q > 65535) {
    throw Error("q: batch and head counts above 65535 are not supported by the CUDA kernels");
  }
  const Family family = classify_policy(args.policy, in);
  const bool decode = (family == Family::exact || family == Family::fdpp) && ps.seq_q <= cuda::kDecodeMaxSeqQ;
  if (family == Family::fdpp && !decode) {
    throw Error("policy '" + to_string(args.policy) + "': the fdpp policies (FlashDecoding++) run on the "
                "CUDA decode path only, which takes S_q <= " + std::to_string(cuda::kDecodeMaxSeqQ) +
                " (q has S_q = " + std::to_string(ps.seq_q) + ")");
  }

  const int device = check_device();
  check_device_pointer(args.q.data, "q", device);
  check_device_pointer(args.k.data, "k", device);
  check_device_pointer(args.v.data, "v", device);
  check_device_pointer(args.o.data, "o", device);
  if (args.lse.data != nullptr) check_device_pointer(args.lse.data, "lse", device);

  const double alpha = resolve_scale(args, ps.dim);

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
  const int batch = static_cast<int>(ps.batch);
  const int dim = static_cast<int>(ps.dim);

  cuda::KernelRequest call{};
  call.fwd = p;
  call.batch = batch;
  call.heads_kv = static_cast<int>(ps.heads_kv);
  call.head_dim = dim;
  call.in_type = elem_type(in);
  call.device = device;
  call.alpha = alpha;

  if (decode) {
    cuda::DecodeRequest r{};
    static_cast<cuda::KernelRequest&>(r) = call;
    r.fdpp_formats = family == Family::fdpp;
    r.unified = family == Family::fdpp && args.policy.shift == Shift::unified;
    r.phi = args.policy.phi;
    r.window_lo = args.policy.window_lo;
    r.window_hi = args.policy.window_hi;
    r.policy_splits = args.policy.splits;
    const long long recomputed = cuda::run_decode(r, args.stats != nullptr && r.unified, args.stream);
    fill_stats(args.stats, ps, recomputed);
    return;
  }
  fill_stats(args.stats, ps, 0);
  if (family == Family::exact) {
    cuda::launch_exact_fwd(p, batch, dim, elem_type(in), args.stream);
    return;
  }
  if (family == Family::sage8) {
    cuda::launch_sage8(call, args.stream);
    return;
  }

  // pasa: M's entries in fp16 (alpha folded in) and their invariance G.
  const PasaShift shift = pasa_shift(args.policy.beta, cuda::kPasaBlockKv, alpha, Format::fp16());
  cuda::PasaRequest r{};
  r.call = call;
  r.call.fwd.pasa_g = static_cast<float>(shift.invariance);
  r.diag = static_cast<float>(shift.diag);
  r.off = static_cast<float>(shift.off);
  r.accurate = args.policy.softmax == Format::fp32();
  r.mean_key_factor = args.policy.pseudo_avg == PseudoAverage::keys
                          ? static_cast<float>(shift.diag + (cuda::kPasaBlockKv - 1) * shift.off)
                          : 0.0f;
  cuda::launch_pasa(r, args.stream);
}

}  // namespace pasa
