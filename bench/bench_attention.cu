// The developers' benchmark of kernel variants (the user-facing benchmark is `pasa bench`). It first
// times pasa's CUDA kernels through the public API (pasa::attention on device tensors), as a baseline
// for the variants in the same process: exact (fp16, bf16) and pasa (fp16), head dims 64 / 128, S = 1k / 4k / 16k with
// B * S = 32k tokens, H * D = 2048 (16 heads of 128, 32 of 64), causal and not. Each point: 5 warm-up
// calls, then the median of 30 calls timed one by one with CUDA events. TFLOP/s = 4 B H S^2 D / t,
// halved for causal (the convention of docs/performance.md).
//
// pasa f16 is also timed with the scratch behaviour it had before its own memory pool
// ("pasa-pasa-oldpool": a cudaMallocAsync / cudaFreeAsync of K''s size on the device's default pool
// around each call, whose release threshold 0 hands the memory back at every synchronize).
//
// Then the exact kernel's variants (fwd_tiles.h, FwdVariant: the tuned shape with one lever changed
// each), f16 at S = 4k / 16k through the internal launch, each checked against the tuned kernel's
// output (max |difference|), so that one run prices every lever (bench/NOTES.md); and PASA's prepass
// alone.
//
// Then decoding (S_q = 1, the split-KV path) through the public API: 32 query / 8 KV heads, d = 128,
// bf16, B = 64 at S_kv = 4k / 8k / 16k / 32k and two small batches; rows "decode:<policy>" whose
// last column is TB/s (bytes of K and V read / time), not TFLOP/s. And the decode kernel's variants
// (decode_params.h, DecodeVariant) at B = 64 through the internal launch, timed round-robin, each
// output checked bit for bit against the tuned kernel's: rows "decode:v:<variant>".
//
// Usage: bench_attention [csv_path] [--no-variants]   (one CSV row per point; prints a table either way)
//        (built with -DPASA_BENCH_NO_VARIANTS and without fwd_variants.cu: never the variants)
//        bench_attention --profile     (one exact and one pasa call per head dim, for ncu)
// Built by scripts/device_run.sh: nvcc ... bench/bench_attention.cu bench/fwd_variants.cu
// build/libpasa_core.a
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/device_fill.h"
#include "cuda/pasa_stage.cuh"
#include "decode_variants.h"
#include "fwd_variants.h"
#include "pasa/attention.h"
#include "pasa/error.h"
#include "pasa/policy.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// The number of 16-bit words where a and b differ, added into *out.
__global__ void count_diff(const std::uint16_t* a, const std::uint16_t* b, std::int64_t n, unsigned* out) {
  unsigned c = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    c += a[i] != b[i];
  }
  if (c != 0) atomicAdd(out, c);
}

// max |a - b| over n f16 elements, into *out (an unsigned bit pattern of a non-negative float).
__global__ void max_abs_diff(const __half* a, const __half* b, std::int64_t n, unsigned* out) {
  float m = 0.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float d = fabsf(__half2float(a[i]) - __half2float(b[i]));
    m = fmaxf(m, d != d ? INFINITY : d);  // NaN counts as infinitely wrong
  }
  atomicMax(out, __float_as_uint(m));
}

// One call timed with CUDA events on `stream`: milliseconds from just before it to just after it.
template <typename Call>
float time_ms(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, Call&& call) {
  check(cudaEventRecord(start, stream), "cudaEventRecord");
  call();
  check(cudaEventRecord(stop, stream), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  return ms;
}

#ifdef PASA_BENCH_NO_VARIANTS
}  // namespace
namespace pasa::cuda {  // never called: the variants section is off in this build
void launch_fwd_variant(const FwdParams&, int, int, FwdVariant, void*) {
  throw Error("bench built without the kernel variants");
}
}  // namespace pasa::cuda
namespace {
#endif

struct Point {
  std::string method;
  std::string dtype;
  int D, H, S, B;
  bool causal;
  double ms, tflops;
};

// Decode through the public API (see the header). K / V are filled once at the largest shape; each
// point reads a prefix of them.
void bench_decode(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, std::vector<Point>& points,
                  int warmup, int runs) {
  struct Shape {
    int B, S;
  };
  const Shape shapes[] = {{64, 4096}, {64, 8192}, {64, 16384}, {64, 32768}, {1, 32768}, {8, 16384}};
  constexpr int Hq = 32, Hkv = 8, D = 128;
  std::int64_t kv_elems = 0;
  for (const Shape& sh : shapes) kv_elems = std::max<std::int64_t>(kv_elems, std::int64_t{sh.B} * Hkv * sh.S * D);
  const std::int64_t q_elems = std::int64_t{64} * Hq * D;
  std::uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  check(cudaMalloc(&k, kv_elems * 2), "cudaMalloc (decode K)");
  check(cudaMalloc(&v, kv_elems * 2), "cudaMalloc (decode V)");
  check(cudaMalloc(&q, q_elems * 2), "cudaMalloc");
  check(cudaMalloc(&o, q_elems * 2), "cudaMalloc");
  check(cudaMalloc(&lse, 64 * Hq * sizeof(float)), "cudaMalloc");
  pasa::cuda::fill_uniform_16bit(k, kv_elems, 777, true, stream);
  pasa::cuda::fill_uniform_16bit(v, kv_elems, 778, true, stream);
  pasa::cuda::fill_uniform_16bit(q, q_elems, 779, true, stream);

  pasa::Policy exact = pasa::preset_policy("exact");
  exact.input = exact.p = pasa::Format::bf16();
  pasa::Policy fdpp = pasa::preset_policy("fdpp");
  fdpp.splits = 1;  // split count from the shape, as exact
  const std::pair<const char*, pasa::Policy> methods[] = {{"decode:exact", exact}, {"decode:fdpp", fdpp}};
  for (const Shape& sh : shapes) {
    for (const auto& [name, policy] : methods) {
      pasa::AttentionArgs args;
      args.q = pasa::bhsd_view(q, pasa::DType::bf16, sh.B, Hq, 1, D, pasa::Device::cuda);
      args.k = pasa::bhsd_view(k, pasa::DType::bf16, sh.B, Hkv, sh.S, D, pasa::Device::cuda);
      args.v = pasa::bhsd_view(v, pasa::DType::bf16, sh.B, Hkv, sh.S, D, pasa::Device::cuda);
      args.o = pasa::bhsd_view(o, pasa::DType::bf16, sh.B, Hq, 1, D, pasa::Device::cuda);
      args.lse = pasa::lse_view(lse, sh.B, Hq, 1, pasa::Device::cuda);
      args.policy = policy;
      args.backend = pasa::Backend::cuda;
      args.stream = stream;
      std::vector<float> times;
      try {
        for (int i = 0; i < warmup; ++i) pasa::attention(args);
        for (int i = 0; i < runs; ++i) {
          times.push_back(time_ms(stream, start, stop, [&] { pasa::attention(args); }));
        }
      } catch (const pasa::Error& e) {
        std::fprintf(stderr, "%s B%d S_kv %d: %s\n", name, sh.B, sh.S, e.what());
        continue;
      }
      std::sort(times.begin(), times.end());
      const double ms = times[times.size() / 2];
      const double bytes = 2.0 * sh.B * Hkv * static_cast<double>(sh.S) * D * 2;  // K and V, bf16
      const double tbps = bytes / (ms * 1e-3) / 1e12;
      points.push_back({name, "bf16", D, Hq, sh.S, sh.B, false, ms, tbps});
      std::printf("%-13s bf16 D%d Hq%d Hkv%d S_q1 S_kv%-6d B%-3d %9.4f ms %6.2f TB/s (K, V read)\n", name, D, Hq,
                  Hkv, sh.S, sh.B, ms, tbps);
      std::fflush(stdout);
    }
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  // The kernel's variants at B = 64 (one split: the CTAs write O directly, as the API's call does).
  using pasa::cuda::DecodeVariant;
  const char* names[pasa::cuda::kDecodeVariants] = {"tuned", "2stages", "4stages", "noprefetch", "prefetch256"};
  std::uint16_t* o_ref = nullptr;
  unsigned* d_count = nullptr;
  check(cudaMalloc(&o_ref, q_elems * 2), "cudaMalloc");
  check(cudaMalloc(&d_count, sizeof(unsigned)), "cudaMalloc");
  for (const Shape& sh : shapes) {
    if (sh.B != 64) continue;
    pasa::cuda::FwdParams f{};
    const std::int64_t kv_h = static_cast<std::int64_t>(sh.S) * D;
    f.q = {q, Hq * D, D, D};
    f.k = {k, Hkv * kv_h, kv_h, D};
    f.v = {v, Hkv * kv_h, kv_h, D};
    f.o = o;
    f.o_stride_b = Hq * D;
    f.o_stride_h = D;
    f.o_stride_s = D;
    f.o_type = pasa::cuda::ElemType::bf16;
    f.lse = lse;
    f.lse_stride_b = Hq;
    f.lse_stride_h = 1;
    f.lse_stride_s = 1;
    f.seq_q = 1;
    f.seq_kv = sh.S;
    f.heads_q = Hq;
    f.group = Hq / Hkv;
    f.causal_offset = sh.S - 1;
    f.scale_log2 = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(D)));
    pasa::cuda::DecodeParams p{};
    p.fwd = f;
    p.heads_kv = Hkv;
    p.rows = Hq / Hkv;
    p.row_chunks = 1;
    p.splits = 1;
    p.split_keys = (sh.S + 63) / 64 * 64;
    p.direct = true;
    std::vector<std::vector<float>> times(pasa::cuda::kDecodeVariants);
    std::vector<unsigned> differ(pasa::cuda::kDecodeVariants, 0);
    try {
      for (int vi = 0; vi < pasa::cuda::kDecodeVariants; ++vi) {
        for (int i = 0; i < warmup; ++i) pasa::cuda::launch_decode_variant(p, sh.B, static_cast<DecodeVariant>(vi), stream);
        if (vi == 0) {
          check(cudaMemcpyAsync(o_ref, o, q_elems * 2, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
          continue;
        }
        check(cudaMemsetAsync(d_count, 0, sizeof(unsigned), stream), "cudaMemsetAsync");
        count_diff<<<64, 256, 0, stream>>>(o, o_ref, std::int64_t{sh.B} * Hq * D, d_count);
        check(cudaMemcpyAsync(&differ[vi], d_count, sizeof(unsigned), cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      }
      for (int i = 0; i < runs; ++i) {
        for (int vi = 0; vi < pasa::cuda::kDecodeVariants; ++vi) {
          times[vi].push_back(time_ms(stream, start, stop, [&] {
            pasa::cuda::launch_decode_variant(p, sh.B, static_cast<DecodeVariant>(vi), stream);
          }));
        }
      }
    } catch (const pasa::Error& e) {
      std::fprintf(stderr, "decode variants S_kv %d: %s\n", sh.S, e.what());
      continue;
    }
    const double bytes = 2.0 * sh.B * Hkv * static_cast<double>(sh.S) * D * 2;
    for (int vi = 0; vi < pasa::cuda::kDecodeVariants; ++vi) {
      std::sort(times[vi].begin(), times[vi].end());
      const double ms = times[vi][times[vi].size() / 2];
      const std::string name = std::string("decode:v:") + names[vi];
      points.push_back({name, "bf16", D, Hq, sh.S, sh.B, false, ms, bytes / (ms * 1e-3) / 1e12});
      std::printf("%-22s bf16 D%d S_kv%-6d B%-3d %9.4f ms %6.2f TB/s  O words != tuned: %u%s\n", name.c_str(), D,
                  sh.S, sh.B, ms, points.back().tflops, differ[vi], differ[vi] != 0 ? "  MISMATCH" : "");
    }
    std::fflush(stdout);
  }
  cudaFree(o_ref);
  cudaFree(d_count);
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
  cudaFree(lse);
}

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = argc > 1 && argv[1][0] != '-' ? argv[1] : nullptr;
  bool run_variants = true;
  for (int i = 1; i < argc; ++i) run_variants &= std::string(argv[i]) != "--no-variants";
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s (sm_%d%d), %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);

  constexpr std::int64_t kTokens = 32768;
  constexpr int kWarmup = 5, kRuns = 30;
  const std::int64_t max_elems = kTokens * 2048;
  std::uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  float* lse = nullptr;
  check(cudaMalloc(&q, max_elems * 2), "cudaMalloc");
  check(cudaMalloc(&k, max_elems * 2), "cudaMalloc");
  check(cudaMalloc(&v, max_elems * 2), "cudaMalloc");
  check(cudaMalloc(&o, max_elems * 2), "cudaMalloc");
  check(cudaMalloc(&lse, kTokens * 32 * sizeof(float)), "cudaMalloc");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");

  struct Variant {
    std::string name;
    pasa::DType dtype;
    pasa::Policy policy;
    bool old_pool = false;  // emulate the default-pool scratch of before (see the header)
  };
  auto exact_for = [](pasa::Format f) {
    pasa::Policy p = pasa::preset_policy("exact");
    p.input = f;
    p.p = f;
    return p;
  };
  const Variant variants[] = {
      {"pasa-exact", pasa::DType::f16, exact_for(pasa::Format::fp16())},
      {"pasa-exact", pasa::DType::bf16, exact_for(pasa::Format::bf16())},
      {"pasa-pasa", pasa::DType::f16, pasa::preset_policy("pasa")},
      {"pasa-pasa-oldpool", pasa::DType::f16, pasa::preset_policy("pasa"), true},
      {"pasa-sage8", pasa::DType::f16, pasa::preset_policy("sage8")},  // prepass + kernel, end to end
  };

  // --profile: one call of exact and of pasa (f16, non-causal, S = 4k) per head dim, for a profiler
  // (ncu) to look at; nothing timed.
  if (argc > 1 && std::string(argv[1]) == "--profile") {
    for (const int D : {128, 64}) {
      const int H = static_cast<int>(2048 / D);
      const int S = 4096, B = static_cast<int>(kTokens / S);
      const std::int64_t n = static_cast<std::int64_t>(B) * H * S * D;
      for (const int vi : {0, 2}) {
        pasa::cuda::fill_uniform_16bit(q, n, 1, false, stream);
        pasa::cuda::fill_uniform_16bit(k, n, 2, false, stream);
        pasa::cuda::fill_uniform_16bit(v, n, 3, false, stream);
        pasa::AttentionArgs args;
        args.q = pasa::bhsd_view(q, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.k = pasa::bhsd_view(k, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.v = pasa::bhsd_view(v, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.o = pasa::bhsd_view(o, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.lse = pasa::lse_view(lse, B, H, S, pasa::Device::cuda);
        args.policy = variants[vi].policy;
        args.backend = pasa::Backend::cuda;
        args.stream = stream;
        pasa::attention(args);
      }
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::printf("profile calls done\n");
    return 0;
  }

  std::vector<Point> points;
  std::uint64_t seed = 12345;
  for (const int D : {64, 128}) {
    const int H = static_cast<int>(2048 / D);
    for (const int S : {1024, 4096, 16384}) {
      const int B = static_cast<int>(kTokens / S);
      for (const bool causal : {false, true}) {
        for (const Variant& m : variants) {
          const std::string& name = m.name;
          const std::int64_t n = static_cast<std::int64_t>(B) * H * S * D;
          const bool bf16 = m.dtype == pasa::DType::bf16;
          pasa::cuda::fill_uniform_16bit(q, n, ++seed, bf16, stream);
          pasa::cuda::fill_uniform_16bit(k, n, ++seed, bf16, stream);
          pasa::cuda::fill_uniform_16bit(v, n, ++seed, bf16, stream);
                  pasa::AttentionArgs args;
          args.q = pasa::bhsd_view(q, m.dtype, B, H, S, D, pasa::Device::cuda);
          args.k = pasa::bhsd_view(k, m.dtype, B, H, S, D, pasa::Device::cuda);
          args.v = pasa::bhsd_view(v, m.dtype, B, H, S, D, pasa::Device::cuda);
          args.o = pasa::bhsd_view(o, m.dtype, B, H, S, D, pasa::Device::cuda);
          args.lse = pasa::lse_view(lse, B, H, S, pasa::Device::cuda);
          args.causal = causal;
          args.policy = m.policy;
          args.backend = pasa::Backend::cuda;
          args.stream = stream;
          std::vector<float> times;
          const std::size_t old_bytes = static_cast<std::size_t>(n) * 2;  // K' of f16 inputs
          const auto call = [&] {
            void* old = nullptr;
            if (m.old_pool) check(cudaMallocAsync(&old, old_bytes, stream), "cudaMallocAsync");
            pasa::attention(args);
            if (m.old_pool) check(cudaFreeAsync(old, stream), "cudaFreeAsync");
          };
          try {
            for (int i = 0; i < kWarmup; ++i) call();
            for (int i = 0; i < kRuns; ++i) {
              times.push_back(time_ms(stream, start, stop, call));
            }
          } catch (const pasa::Error& e) {
            std::fprintf(stderr, "%s D%d S%d: %s\n", name.c_str(), D, S, e.what());
            continue;
          }
          std::sort(times.begin(), times.end());
          const double ms = times[times.size() / 2];
          const double flops = 4.0 * B * H * static_cast<double>(S) * S * D * (causal ? 0.5 : 1.0);
          points.push_back({name, bf16 ? "bf16" : "fp16", D, H, S, B, causal, ms, flops / (ms * 1e-3) / 1e12});
          const Point& p = points.back();
          std::printf("%-17s %-4s D%-3d H%-2d S%-5d B%-2d %-6s %9.3f ms %7.1f TFLOP/s\n", p.method.c_str(),
                      p.dtype.c_str(), D, H, S, B, causal ? "causal" : "full", ms, p.tflops);
          std::fflush(stdout);
        }
      }
    }
  }

  // sage8 (quantization prepass + INT8 / FP8 kernel, end to end) beside exact and SageAttention2's
  // published sm90 numbers (TOPS of its 8-bit kernel, fp16 inputs, S = 1k / 4k / 16k).
  {
    struct SageRef {
      int D;
      bool causal;
      double tops[3];
    };
    const SageRef refs[] = {{128, false, {211, 521, 722}}, {128, true, {115, 323, 572}},
                            {64, false, {175, 376, 503}},  {64, true, {99, 261, 448}}};
    auto find = [&](const char* method, int D, int S, bool causal) {
      for (const Point& pt : points)
        if (pt.method == method && pt.dtype == "fp16" && pt.D == D && pt.S == S && pt.causal == causal) return pt.tflops;
      return 0.0;
    };
    std::printf("\nsage8-table: TFLOP/s, fp16 (sage8 = prepass + kernel; SageAttn2 = its published sm90 TOPS)\n");
    std::printf("sage8-table: %4s %6s %-6s %10s %10s %10s %12s\n", "D", "S", "mask", "exact", "sage8", "SageAttn2",
                "sage8/Sage2");
    for (const SageRef& ref : refs) {
      const int Ss[3] = {1024, 4096, 16384};
      for (int i = 0; i < 3; ++i) {
        const double ours = find("pasa-sage8", ref.D, Ss[i], ref.causal);
        std::printf("sage8-table: %4d %6d %-6s %10.1f %10.1f %10.0f %12.2f\n", ref.D, Ss[i],
                    ref.causal ? "causal" : "full", find("pasa-exact", ref.D, Ss[i], ref.causal), ours,
                    ref.tops[i], ours / ref.tops[i]);
      }
    }
    std::fflush(stdout);
  }

  // The exact kernel's variants (fwd_tiles.h, FwdVariant), f16, through the internal launch (no
  // dispatch checks: the same launch the dispatcher makes for the tuned shape). Each variant's output is checked against
  // the tuned one's (the per-row arithmetic is the same, so any difference is a bug; except for half
  // key tiles, whose online softmax rescales at other points: rounding-level differences), then all variants
  // of a point are timed round-robin (run i of every variant, then run i + 1), so that clock drift
  // during the benchmark biases none of them.
  std::uint16_t* o_ref = nullptr;
  unsigned* d_diff = nullptr;
  check(cudaMalloc(&o_ref, max_elems * 2), "cudaMalloc");
  check(cudaMalloc(&d_diff, sizeof(unsigned)), "cudaMalloc");
#ifdef PASA_BENCH_NO_VARIANTS  // built without fwd_variants.cu
  run_variants = false;
#endif
  if (run_variants) {
    using pasa::cuda::FwdVariant;
    const char* names[pasa::cuda::kFwdVariants] = {"tuned", "stages", "v1shape", "epilogue", "8warps", "halfN"};
    {
      for (const int D : {64, 128}) {
        const int H = static_cast<int>(2048 / D);
        for (const int S : {4096, 16384}) {
          const int B = static_cast<int>(kTokens / S);
          for (const bool causal : {false, true}) {
            const std::int64_t n = static_cast<std::int64_t>(B) * H * S * D;
            pasa::cuda::fill_uniform_16bit(q, n, ++seed, false, stream);
            pasa::cuda::fill_uniform_16bit(k, n, ++seed, false, stream);
            pasa::cuda::fill_uniform_16bit(v, n, ++seed, false, stream);
                      const std::int64_t sh = static_cast<std::int64_t>(S) * D, sb = H * sh;
            const double alpha = 1.0 / std::sqrt(static_cast<double>(D));
            pasa::cuda::FwdParams p{};
            p.q = {q, sb, sh, D};
            p.k = {k, sb, sh, D};
            p.v = {v, sb, sh, D};
            p.o = o;
            p.o_stride_b = sb;
            p.o_stride_h = sh;
            p.o_stride_s = D;
            p.o_type = pasa::cuda::ElemType::f16;
            p.lse = lse;
            p.lse_stride_b = static_cast<std::int64_t>(H) * S;
            p.lse_stride_h = S;
            p.lse_stride_s = 1;
            p.seq_q = p.seq_kv = S;
            p.heads_q = H;
            p.group = 1;
            p.causal = causal;
            p.causal_offset = 0;
            p.scale_log2 = static_cast<float>(1.4426950408889634 * alpha);
            p.negate_q = false;
            std::vector<int> live;  // every variant
            for (int vi = 0; vi < pasa::cuda::kFwdVariants; ++vi) live.push_back(vi);
            std::vector<float> diffs(live.size(), 0.0f);
            std::vector<std::vector<float>> times(live.size());
            try {
              for (std::size_t li = 0; li < live.size(); ++li) {  // warm-up and the output check
                const auto variant = static_cast<FwdVariant>(live[li]);
                for (int i = 0; i < kWarmup; ++i) pasa::cuda::launch_fwd_variant(p, B, D, variant, stream);
                if (li == 0) {
                  check(cudaMemcpyAsync(o_ref, o, n * 2, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
                  continue;
                }
                check(cudaMemsetAsync(d_diff, 0, sizeof(unsigned), stream), "cudaMemsetAsync");
                max_abs_diff<<<1024, 256, 0, stream>>>(reinterpret_cast<const __half*>(o),
                                                       reinterpret_cast<const __half*>(o_ref), n, d_diff);
                unsigned bits = 0;
                check(cudaMemcpyAsync(&bits, d_diff, sizeof(unsigned), cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
                check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                std::memcpy(&diffs[li], &bits, sizeof(float));
              }
              for (int i = 0; i < kRuns; ++i) {
                for (std::size_t li = 0; li < live.size(); ++li) {
                  times[li].push_back(time_ms(stream, start, stop, [&] {
                    pasa::cuda::launch_fwd_variant(p, B, D, static_cast<FwdVariant>(live[li]), stream);
                  }));
                }
              }
            } catch (const pasa::Error& e) {
              std::fprintf(stderr, "variants D%d S%d: %s\n", D, S, e.what());
              continue;
            }
            for (std::size_t li = 0; li < live.size(); ++li) {
              std::sort(times[li].begin(), times[li].end());
              const double ms = times[li][times[li].size() / 2];
              const double flops = 4.0 * B * H * static_cast<double>(S) * S * D * (causal ? 0.5 : 1.0);
              const std::string name = std::string("x:") + names[live[li]];
              points.push_back({name, "fp16", D, H, S, B, causal, ms, flops / (ms * 1e-3) / 1e12});
              const Point& pt = points.back();
              std::printf("%-14s fp16 D%-3d H%-2d S%-5d B%-2d %-6s %9.3f ms %7.1f TFLOP/s  max|O - tuned| %.3g%s\n",
                          pt.method.c_str(), D, H, S, B, causal ? "causal" : "full", ms, pt.tflops, diffs[li],
                          diffs[li] > (live[li] == static_cast<int>(FwdVariant::half_block_n) ? 1e-2f : 0.0f)
                              ? "  MISMATCH"
                              : "");
            }
            std::fflush(stdout);
          }
        }
      }
    }

    // PASA's prepass alone (K' = M K as the wgmma kernel's tiles, f16: V is not touched): memory-bound;
    // TB/s counts K read and the tiles written.
    for (const int D : {64, 128}) {
      const int H = static_cast<int>(2048 / D);
      const int S = 4096, B = static_cast<int>(kTokens / S);
      const std::int64_t n = static_cast<std::int64_t>(B) * H * S * D;
      const std::int64_t sh = static_cast<std::int64_t>(S) * D, sb = H * sh;
      pasa::cuda::PasaRequest r{};
      r.call.fwd.k = {k, sb, sh, D};
      r.call.fwd.v = {v, sb, sh, D};
      r.call.fwd.seq_kv = S;
      r.call.batch = B;
      r.call.heads_kv = H;
      r.call.head_dim = D;
      r.call.in_type = pasa::cuda::ElemType::f16;
      r.diag_full = r.diag_last = 0.0883f;
      r.off_full = r.off_last = -0.000687f;
      const int n_kb = (S + pasa::cuda::kPasaBlockKv - 1) / pasa::cuda::kPasaBlockKv;
      const std::size_t tile_bytes = pasa::cuda::pasa_tile_bytes(B, H, n_kb, D);
      void* tiles = nullptr;
      check(cudaMalloc(&tiles, tile_bytes), "cudaMalloc");
      const auto prepass = [&] {
        pasa::cuda::launch_pasa_tiles(r, static_cast<std::uint8_t*>(tiles), nullptr, n_kb, stream);
      };
      std::vector<float> times;
      for (int i = 0; i < kWarmup; ++i) prepass();
      for (int i = 0; i < kRuns; ++i) times.push_back(time_ms(stream, start, stop, prepass));
      cudaFree(tiles);
      std::sort(times.begin(), times.end());
      const double ms = times[times.size() / 2];
      std::printf("pasa-prepass   fp16 D%-3d H%-2d S%-5d B%-2d %9.4f ms %6.2f TB/s (K read + tiles written)\n", D, H,
                  S, B, ms, (2.0 * n + static_cast<double>(tile_bytes)) / (ms * 1e-3) / 1e12);
    }
  }
  cudaFree(o_ref);
  cudaFree(d_diff);
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
  cudaFree(lse);
  q = k = v = o = nullptr;
  lse = nullptr;

  bench_decode(stream, start, stop, points, kWarmup, kRuns);

  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (csv_path != nullptr) {
    FILE* f = std::fopen(csv_path, "w");
    if (f != nullptr) {
      std::fprintf(f, "method,dtype,D,H,S,B,causal,ms,tflops\n");
      for (const Point& p : points) {
        std::fprintf(f, "%s,%s,%d,%d,%d,%d,%d,%.4f,%.2f\n", p.method.c_str(), p.dtype.c_str(), p.D, p.H, p.S,
                     p.B, p.causal ? 1 : 0, p.ms, p.tflops);
      }
      std::fclose(f);
    }
  }
  return 0;
}
