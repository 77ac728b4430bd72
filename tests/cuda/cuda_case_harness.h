// SPDX-License-Identifier: Apache-2.0
// The harness of the CUDA tests: one case (shape, layout, dtypes, causal, window, softcap, attention
// mask) run on the GPU kernel and on
// the CPU emulator running the same policy, both against the fp64 reference. The rule (FlashAttention-3's,
// made two-sided): the kernel's error is within [0.5x, 2x] of its emulated twin's plus a small atol,
// for O (relative RMSE) and, one-sided, for the LSE (RMS over rows; fully masked rows must be -inf in
// both). Outputs are poisoned with NaN before each launch. Without a GPU of compute capability 8.0 or
// newer every test is skipped; tests of the sm_90a-only kernel (sage8) also need the Hopper path.
#pragma once
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cuda_backend.h"
#include "pasa/attention.h"
#include "pasa/generators.h"
#include "pasa/policy.h"
#include "test_util.h"

namespace pasa {
namespace {  // (each test file gets its own copy)

using test::Tensor4;

bool have_gpu() {
  static const bool ok = cuda_backend_available();
  return ok;
}

bool have_hopper_path() {
  static const bool ok = cuda_hopper_path_available();
  return ok;
}

#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    if (!have_gpu()) GTEST_SKIP() << "no sm_80+ GPU: CUDA tests skipped"; \
  } while (0)

// The sm_90a kernels: an sm_90 GPU, a build with 90a, and PASA_CUDA_PATH not forcing the portable path.
#define REQUIRE_HOPPER_PATH()                                                               \
  do {                                                                                      \
    if (!have_hopper_path()) GTEST_SKIP() << "no sm_90a path: Hopper kernel tests skipped"; \
  } while (0)

// The kernel path run_case asks for (AttentionArgs::cuda_path); the fixtures of the tests that run on
// both paths set it per test.
CudaPath g_cuda_path = CudaPath::automatic;

const char* path_name(CudaPath p) { return p == CudaPath::portable ? "portable" : "automatic"; }

// A test run once per CUDA path: automatic (the sm_90a kernels on an sm_90 GPU) and portable forced.
class OnEachCudaPath : public ::testing::TestWithParam<CudaPath> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no sm_80+ GPU: CUDA tests skipped";
    g_cuda_path = GetParam();
  }
  void TearDown() override { g_cuda_path = CudaPath::automatic; }
};

std::string path_param_name(const ::testing::TestParamInfo<CudaPath>& info) { return path_name(info.param); }

// The shared memory the current device grants a CTA (its opt-in maximum), as pasa's dispatch takes
// it: at most PASA_CUDA_SMEM_LIMIT where that is set (ctest runs the decode tests once so, as a 99 KiB
// device would).
int granted_shared_memory() {
  int device = 0, smem = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (const char* limit = std::getenv("PASA_CUDA_SMEM_LIMIT"); limit != nullptr && *limit != '\0') {
    smem = std::min(smem, std::atoi(limit));
  }
  return smem;
}

// Whether the current device grants a CTA `bytes` of shared memory (granted_shared_memory).
bool device_grants_shared_memory(int bytes) { return bytes <= granted_shared_memory(); }

void cuda_ok(cudaError_t status, const char* what) {
  ASSERT_EQ(status, cudaSuccess) << what << ": " << cudaGetErrorString(status);
}

// An owning device buffer.
struct DeviceBuffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, n) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A device copy of a host tensor: same dtype, shape and strides.
struct DeviceTensor {
  DeviceBuffer buf;
  TensorView view;
  explicit DeviceTensor(const Tensor4& host) : buf(host.bytes.size()), view(host.view) {
    view.data = buf.ptr;
    view.device = Device::cuda;
    cudaMemcpy(buf.ptr, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice);
  }
  void poison() { cudaMemset(buf.ptr, 0xff, buf.bytes); }  // all-ones: NaN in f32, f16 and bf16
  void copy_to(Tensor4& host) const {
    cudaMemcpy(host.bytes.data(), buf.ptr, host.bytes.size(), cudaMemcpyDeviceToHost);
  }
  void upload(const Tensor4& host) { cudaMemcpy(buf.ptr, host.bytes.data(), buf.bytes, cudaMemcpyHostToDevice); }
  std::vector<std::uint8_t> download() const {
    std::vector<std::uint8_t> out(buf.bytes);
    cudaMemcpy(out.data(), buf.ptr, buf.bytes, cudaMemcpyDeviceToHost);
    return out;
  }
};

// v with each size-1 dimension's stride set to 1, as DLPack from torch before 2.9 exports it (a stride
// that addresses nothing, and no multiple of 16 bytes).
TensorView with_size_one_strides_of_one(TensorView v) {
  for (int i = 0; i < 4; ++i) {
    if (v.shape[i] == 1) v.stride[i] = 1;
  }
  return v;
}

Format format_of(DType d) { return d == DType::bf16 ? Format::bf16() : Format::fp16(); }

// The exact policy as the kernel runs it: P rounded to the input dtype.
Policy exact_policy(DType in) {
  Policy p = preset_policy("exact");
  p.input = format_of(in);
  p.p = format_of(in);
  return p;
}

Policy pasa_policy() { return preset_policy("pasa"); }  // s1 = s2 = 128, beta 0.984497

// An attention mask a case draws with its inputs, each kind with another broadcast: boolean
// [B, 1, S_q, S_kv] (a fifth of the keys hidden, and every key of query row 1), additive f32
// [1, H_q, S_q, S_kv], f16 [B, H_q, S_q, S_kv] and bf16 [B, 1, S_q, S_kv] with one row for all (a
// padding mask: stride 0 over S_q) of values in [-3, 3] with a fifth -inf.
enum class CaseMask { none, boolean, add_f32, add_f16, add_bf16 };

struct Case {
  std::int64_t B, Hq, Hkv, Sq, Skv, D;
  bool causal;
  CausalAlignment alignment;
  bool bshd;
  DType in, out;
  std::int64_t window_left = -1, window_right = -1;  // AttentionArgs' sliding window
  double softcap = 0.0;
  CaseMask mask = CaseMask::none;
};

const char* mask_name(CaseMask m) {
  switch (m) {
    case CaseMask::none: break;
    case CaseMask::boolean: return " mask bool[B,1,Sq,Skv]";
    case CaseMask::add_f32: return " mask f32[1,H,Sq,Skv]";
    case CaseMask::add_f16: return " mask f16[B,H,Sq,Skv]";
    case CaseMask::add_bf16: return " mask bf16[B,1,Sq(stride 0),Skv]";
  }
  return "";
}

// A case's mask on the host: its elements (one byte or one additive value each) and its view.
struct HostMask {
  std::vector<std::uint8_t> bytes;
  MaskView view;
};

HostMask draw_mask(const Case& c, std::mt19937_64& rng) {
  HostMask m;
  if (c.mask == CaseMask::none) return m;
  const bool boolean = c.mask == CaseMask::boolean;
  const DType dtype = c.mask == CaseMask::add_f16    ? DType::f16
                      : c.mask == CaseMask::add_bf16 ? DType::bf16
                                                     : DType::f32;
  const std::int64_t mb = c.mask == CaseMask::add_f32 ? 1 : c.B;
  const std::int64_t mh = c.mask == CaseMask::add_f32 || c.mask == CaseMask::add_f16 ? c.Hq : 1;
  const std::int64_t ms = c.mask == CaseMask::add_bf16 ? 1 : c.Sq;
  const std::int64_t n = mb * mh * ms * c.Skv;
  m.bytes.resize(static_cast<std::size_t>(n) * (boolean ? 1 : dtype_size(dtype)));
  for (std::int64_t i = 0; i < n; ++i) {
    const bool hide = test::uniform(rng, 0.0, 1.0) < 0.2 || (boolean && (i / c.Skv) % ms == 1);
    if (boolean) {
      m.bytes[static_cast<std::size_t>(i)] = hide ? 0 : 1;
    } else {
      const double value = test::uniform(rng, -3.0, 3.0);
      store_from_double(m.bytes.data(), dtype, i, hide ? -INFINITY : value);
    }
  }
  m.view.data = m.bytes.data();
  m.view.kind = boolean ? MaskKind::boolean : MaskKind::additive;
  m.view.dtype = dtype;
  m.view.shape = {mb, mh, c.Sq, c.Skv};
  m.view.stride = {mh * ms * c.Skv, ms * c.Skv, ms == 1 ? 0 : c.Skv, 1};  // (S_q broadcasts by stride 0)
  return m;
}

std::string describe(const Case& c) {
  return "B" + std::to_string(c.B) + " Hq" + std::to_string(c.Hq) + " Hkv" + std::to_string(c.Hkv) +
         " Sq" + std::to_string(c.Sq) + " Skv" + std::to_string(c.Skv) + " D" + std::to_string(c.D) +
         (c.causal ? (c.alignment == CausalAlignment::bottom_right ? " causal-br" : " causal-tl") : "") +
         (c.bshd ? " bshd" : " bhsd") + " in " + dtype_name(c.in) + " out " + dtype_name(c.out) +
         (c.window_left >= 0 || c.window_right >= 0
              ? " window(" + std::to_string(c.window_left) + "," + std::to_string(c.window_right) + ")"
              : "") +
         (c.softcap > 0 ? " softcap " + std::to_string(c.softcap) : "") + mask_name(c.mask);
}

// RMS of (x - ref) over rows where ref is finite; NaN if x is not finite there or if x and ref
// disagree on which rows are fully masked (-inf).
double lse_rms_error(const std::vector<float>& x, const std::vector<double>& ref) {
  double sum = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (!(std::isinf(x[i]) && x[i] < 0)) return std::nan("");
      continue;
    }
    if (!std::isfinite(x[i])) return std::nan("");
    sum += (x[i] - ref[i]) * (x[i] - ref[i]);
    ++n;
  }
  return n == 0 ? 0.0 : std::sqrt(sum / n);
}

// RMS of the finite reference LSEs: the scale of the LSE's own rounding error.
double lse_rms(const std::vector<double>& ref) {
  double sum = 0;
  std::size_t n = 0;
  for (double x : ref) {
    if (std::isfinite(x)) {
      sum += x * x;
      ++n;
    }
  }
  return n == 0 ? 0.0 : std::sqrt(sum / n);
}

struct Result {
  double err_kernel, err_emulator, lse_err_kernel, lse_err_emulator;
  double lse_scale;  // RMS of the reference LSE
};

// What run_case can also hand back: both runs' AttentionStats and the kernel's output.
struct Extra {
  AttentionStats kernel_stats, emulator_stats;
  std::vector<double> kernel_o, emulator_o;  // [B, H, S, D] order
  std::vector<float> kernel_lse;
};

// Inputs other than uniform ones: Q, K, V as [B, H, S, D] host tensors in C order (BHSD cases only).
struct GivenInputs {
  HostTensor q, k, v;
};

Tensor4 tensor_from(const HostTensor& h, std::int64_t B, std::int64_t H, std::int64_t S, std::int64_t D) {
  Tensor4 t = test::make_tensor(B, H, S, D, h.dtype);
  EXPECT_EQ(t.bytes.size(), h.bytes.size());
  std::memcpy(t.bytes.data(), h.bytes.data(), std::min(t.bytes.size(), h.bytes.size()));
  return t;
}

// Runs one case on the GPU (kernel_policy) and on the emulator (emulator_policy: the same
// computation as the kernel performs it), both against the fp64 reference.
Result run_case(const Case& c, const Policy& kernel_policy, const Policy& emulator_policy,
                std::mt19937_64& rng, double lo = -1.0, double hi = 1.0,
                std::optional<double> scale = std::nullopt, Extra* extra = nullptr,
                const GivenInputs* given = nullptr) {
  Tensor4 q = given ? tensor_from(given->q, c.B, c.Hq, c.Sq, c.D)
                    : test::random_tensor(c.B, c.Hq, c.Sq, c.D, rng, c.in, c.bshd, lo, hi);
  Tensor4 k = given ? tensor_from(given->k, c.B, c.Hkv, c.Skv, c.D)
                    : test::random_tensor(c.B, c.Hkv, c.Skv, c.D, rng, c.in, c.bshd, lo, hi);
  Tensor4 v = given ? tensor_from(given->v, c.B, c.Hkv, c.Skv, c.D)
                    : test::random_tensor(c.B, c.Hkv, c.Skv, c.D, rng, c.in, c.bshd, lo, hi);
  const HostMask mask = draw_mask(c, rng);
  Tensor4 o_emu = test::make_tensor(c.B, c.Hq, c.Sq, c.D, c.out, c.bshd);
  Tensor4 o_gpu = test::make_tensor(c.B, c.Hq, c.Sq, c.D, c.out, c.bshd);
  test::poison(o_emu);
  test::poison(o_gpu);
  const std::size_t rows = static_cast<std::size_t>(c.B * c.Hq * c.Sq);
  std::vector<float> lse_emu(rows, std::nanf("")), lse_gpu(rows, std::nanf(""));

  AttentionArgs host;
  host.q = q.view;
  host.k = k.view;
  host.v = v.view;
  host.o = o_emu.view;
  host.lse = lse_view(lse_emu.data(), c.B, c.Hq, c.Sq);
  host.causal = c.causal;
  host.alignment = c.alignment;
  host.window_left = c.window_left;
  host.window_right = c.window_right;
  host.softcap = c.softcap;
  host.mask = mask.view;
  host.scale = scale;
  host.policy = emulator_policy;
  host.backend = Backend::emulator;
  host.stats = extra != nullptr ? &extra->emulator_stats : nullptr;
  attention(host);
  const ReferenceResult ref = reference_attention(host);

  DeviceTensor dq(q), dk(k), dv(v), d_o(o_gpu);
  DeviceBuffer dlse(rows * sizeof(float)), dmask(mask.bytes.size());
  cudaMemcpy(dmask.ptr, mask.bytes.data(), mask.bytes.size(), cudaMemcpyHostToDevice);
  d_o.poison();
  cudaMemset(dlse.ptr, 0xff, dlse.bytes);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  AttentionArgs dev = host;
  dev.q = dq.view;
  dev.k = dk.view;
  dev.v = dv.view;
  dev.o = d_o.view;
  dev.lse = lse_view(static_cast<float*>(dlse.ptr), c.B, c.Hq, c.Sq, Device::cuda);
  if (c.mask != CaseMask::none) {
    dev.mask.data = dmask.ptr;
    dev.mask.device = Device::cuda;
  }
  dev.policy = kernel_policy;
  dev.backend = Backend::cuda;
  dev.cuda_path = g_cuda_path;
  dev.stream = stream;
  dev.stats = extra != nullptr ? &extra->kernel_stats : nullptr;
  if (extra != nullptr) extra->kernel_stats = {-1, -1};  // must be overwritten
  attention(dev);
  const cudaError_t sync = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  d_o.copy_to(o_gpu);
  cudaMemcpy(lse_gpu.data(), dlse.ptr, dlse.bytes, cudaMemcpyDeviceToHost);
  const std::vector<double> o_kernel = test::read_bhsd(o_gpu.view);
  if (extra != nullptr) {
    extra->kernel_o = o_kernel;
    extra->emulator_o = test::read_bhsd(o_emu.view);
    extra->kernel_lse = lse_gpu;
  }

  return {test::relative_rmse(o_kernel, ref.o),
          test::relative_rmse(test::read_bhsd(o_emu.view), ref.o), lse_rms_error(lse_gpu, ref.lse),
          lse_rms_error(lse_emu, ref.lse), lse_rms(ref.lse)};
}

void check_case(const Case& c, const Policy& policy, const Policy& emulator_policy,
                std::optional<double> scale = std::nullopt, Extra* extra = nullptr,
                std::optional<std::uint64_t> fixed_seed = std::nullopt, double lo = -1.0, double hi = 1.0,
                const GivenInputs* given = nullptr, const char* inputs = "uniform") {
  const auto seed = fixed_seed ? *fixed_seed : test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(c) << " policy "
                                    << to_string(policy) << " path " << path_name(g_cuda_path) << " scale "
                                    << (scale ? std::to_string(*scale) : std::string("default"))
                                    << " inputs " << inputs);
  std::mt19937_64 rng(seed);
  const Result r = run_case(c, policy, emulator_policy, rng, lo, hi, scale, extra, given);
  ASSERT_TRUE(std::isfinite(r.err_emulator));
  EXPECT_TRUE(std::isfinite(r.err_kernel)) << "kernel output has NaN/inf (or an unwritten element)";
  EXPECT_LE(r.err_kernel, 2 * r.err_emulator + 1e-4)
      << "O: kernel " << r.err_kernel << " vs emulator " << r.err_emulator;
  EXPECT_GE(r.err_kernel + 1e-4, 0.5 * r.err_emulator)
      << "O: kernel " << r.err_kernel << " far below emulator " << r.err_emulator
      << ": the emulator is no longer a model of this kernel";
  EXPECT_TRUE(std::isfinite(r.lse_err_kernel)) << "LSE: non-finite or fully-masked rows differ";
  // The LSE's atol adds one rounding of the softmax format at the LSE's own scale: a case of a few rows
  // (S_q = 1) can differ from the emulator by one fp16 ulp of l. PASA's reference m (about the LSE's
  // whole size) adds G times the block's pseudo-average s', which the kernel takes from the mean K'
  // rows to about 22 bits and the emulator from the scores' sum: 8 units at that scale.
  const double lse_units = policy.shift == Shift::pasa ? 8.0 : 1.0;
  const double lse_atol = 1e-4 + lse_units * policy.softmax.epsilon() * r.lse_scale;
  EXPECT_LE(r.lse_err_kernel, 2 * r.lse_err_emulator + lse_atol)
      << "LSE: kernel " << r.lse_err_kernel << " vs emulator " << r.lse_err_emulator;
  std::printf("  %-60s O err %.3e (emulator %.3e)  LSE err %.3e (emulator %.3e)%s%s\n", describe(c).c_str(),
              r.err_kernel, r.err_emulator, r.lse_err_kernel, r.lse_err_emulator, given ? " inputs " : "",
              given ? inputs : "");
}

void check_case(const Case& c, const Policy& policy) { check_case(c, policy, policy); }

}  // namespace
}  // namespace pasa
