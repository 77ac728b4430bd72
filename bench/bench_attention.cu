// SPDX-License-Identifier: Apache-2.0
// The developers' benchmark of kernel variants (the user-facing benchmark, `pasa bench`, times the
// public API over the same points; scripts/device_run.sh runs both in one call and tabulates them
// together).
//
// The exact kernel's variants (fwd_tiles.h, FwdVariant: the tuned shape with one lever changed each),
// f16, head dims 64 / 128, S = 4k / 16k with B * S = 32k tokens, H * D = 2048, causal and not, through
// the internal launch, each checked against the tuned kernel's output (max |difference|), so that one
// run prices every lever (bench/NOTES.md); then PASA's prepass alone. Each point: 5 warm-up calls,
// then the median of 30 calls timed one by one with CUDA events, round-robin over the variants.
// TFLOP/s = 4 B H S^2 D / t, halved for causal (the convention of docs/performance.md).
//
// Then the decode kernel's variants (decode_params.h, DecodeVariant) at B = 64, 32 query / 8 KV
// heads, d = 128, bf16, S_kv = 4k .. 32k, through the internal launch, timed round-robin, each output
// checked bit for bit against the tuned kernel's: rows "decode:v:<variant>" whose last column is TB/s
// (bytes of K and V read / time), not TFLOP/s.
//
// Usage: bench_attention [csv_path]   (one CSV row per point; prints a line per point either way)
//        bench_attention --profile    (one exact and one pasa call per head dim, for ncu)
//        bench_attention --decode [csv_path]   (the decode variants only)
// Built by scripts/device_run.sh: nvcc ... bench/bench_attention.cu bench/decode_variants.cu
// bench/fwd_variants.cu build/libpasa_core.a
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

#include "cuda/host/device_fill.h"
#include "cuda/block/pasa_prepass.cuh"
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

struct Point {
  std::string method;
  std::string dtype;
  int D, H, S, B;
  bool causal;
  double ms, tflops;
};

// The median of a run's times (sorted in place).
double median_ms(std::vector<float>& times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The decode kernel's variants (see the header). K / V are filled once at the largest shape; each
// point reads a prefix of them.
void bench_decode(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, std::vector<Point>& points,
                  int warmup, int runs) {
  struct Shape {
    int B, S;
  };
  const Shape shapes[] = {{64, 4096}, {64, 8192}, {64, 16384}, {64, 32768}};
  constexpr int Hq = 32, Hkv = 8, D = 128;
  const std::int64_t kv_elems = std::int64_t{64} * Hkv * 32768 * D;
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

  // One split: the CTAs write O directly, as the API's call does.
  using pasa::cuda::DecodeVariant;
  const char* names[pasa::cuda::kDecodeVariants] = {"tuned", "2stages", "4stages", "noprefetch", "prefetch256", "paddedkv"};
  std::uint16_t* o_ref = nullptr;
  unsigned* d_count = nullptr;
  check(cudaMalloc(&o_ref, q_elems * 2), "cudaMalloc");
  check(cudaMalloc(&d_count, sizeof(unsigned)), "cudaMalloc");
  for (const Shape& sh : shapes) {
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
      const double ms = median_ms(times[vi]);
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

// One row per point at csv_path (nothing for null).
void write_csv(const char* csv_path, const std::vector<Point>& points) {
  if (csv_path == nullptr) return;
  FILE* f = std::fopen(csv_path, "w");
  if (f == nullptr) return;
  std::fprintf(f, "method,dtype,D,H,S,B,causal,ms,tflops\n");
  for (const Point& p : points) {
    std::fprintf(f, "%s,%s,%d,%d,%d,%d,%d,%.4f,%.2f\n", p.method.c_str(), p.dtype.c_str(), p.D, p.H, p.S, p.B,
                 p.causal ? 1 : 0, p.ms, p.tflops);
  }
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const bool decode_only = argc > 1 && std::string(argv[1]) == "--decode";
  const int csv_arg = decode_only ? 2 : 1;
  const char* csv_path = argc > csv_arg && argv[csv_arg][0] != '-' ? argv[csv_arg] : nullptr;
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

  // --profile: one call of exact and of pasa (f16, non-causal, S = 4k) per head dim, for a profiler
  // (ncu) to look at; nothing timed.
  if (argc > 1 && std::string(argv[1]) == "--profile") {
    pasa::Policy exact = pasa::preset_policy("exact");
    exact.input = exact.p = pasa::Format::fp16();
    for (const int D : {128, 64}) {
      const int H = static_cast<int>(2048 / D);
      const int S = 4096, B = static_cast<int>(kTokens / S);
      const std::int64_t n = static_cast<std::int64_t>(B) * H * S * D;
      for (const pasa::Policy& policy : {exact, pasa::preset_policy("pasa")}) {
        pasa::cuda::fill_uniform_16bit(q, n, 1, false, stream);
        pasa::cuda::fill_uniform_16bit(k, n, 2, false, stream);
        pasa::cuda::fill_uniform_16bit(v, n, 3, false, stream);
        pasa::AttentionArgs args;
        args.q = pasa::bhsd_view(q, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.k = pasa::bhsd_view(k, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.v = pasa::bhsd_view(v, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.o = pasa::bhsd_view(o, pasa::DType::f16, B, H, S, D, pasa::Device::cuda);
        args.lse = pasa::lse_view(lse, B, H, S, pasa::Device::cuda);
        args.policy = policy;
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
  const auto free_prefill_buffers = [&] {
    for (void* buffer : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(o),
                         static_cast<void*>(lse)}) {
      cudaFree(buffer);
    }
  };
  if (decode_only) {
    free_prefill_buffers();
    bench_decode(stream, start, stop, points, kWarmup, kRuns);
    write_csv(csv_path, points);
    return 0;
  }

  // The exact kernel's variants (fwd_tiles.h, FwdVariant), f16, through the internal launch (no
  // dispatch checks: the same launch the dispatcher makes for the tuned shape). Each variant's output
  // is checked against the tuned one's (the per-row arithmetic is the same, so any difference is a
  // bug; except for half key tiles, whose online softmax rescales at other points: rounding-level
  // differences), then all variants of a point are timed round-robin (run i of every variant, then
  // run i + 1), so that clock drift during the benchmark biases none of them.
  std::uint16_t* o_ref = nullptr;
  unsigned* d_diff = nullptr;
  check(cudaMalloc(&o_ref, max_elems * 2), "cudaMalloc");
  check(cudaMalloc(&d_diff, sizeof(unsigned)), "cudaMalloc");
  using pasa::cuda::FwdVariant;
  constexpr int kVariants = pasa::cuda::kFwdVariants;
  const char* names[kVariants] = {"tuned", "stages", "v1shape", "epilogue", "8warps", "halfN", "paddedkv"};
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
        std::vector<float> diffs(kVariants, 0.0f);
        std::vector<std::vector<float>> times(kVariants);
        try {
          for (int vi = 0; vi < kVariants; ++vi) {  // warm-up and the output check
            for (int i = 0; i < kWarmup; ++i) pasa::cuda::launch_fwd_variant(p, B, D, static_cast<FwdVariant>(vi), stream);
            if (vi == 0) {
              check(cudaMemcpyAsync(o_ref, o, n * 2, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
              continue;
            }
            check(cudaMemsetAsync(d_diff, 0, sizeof(unsigned), stream), "cudaMemsetAsync");
            max_abs_diff<<<1024, 256, 0, stream>>>(reinterpret_cast<const __half*>(o),
                                                   reinterpret_cast<const __half*>(o_ref), n, d_diff);
            unsigned bits = 0;
            check(cudaMemcpyAsync(&bits, d_diff, sizeof(unsigned), cudaMemcpyDeviceToHost, stream), "cudaMemcpy");
            check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            std::memcpy(&diffs[vi], &bits, sizeof(float));
          }
          for (int i = 0; i < kRuns; ++i) {
            for (int vi = 0; vi < kVariants; ++vi) {
              times[vi].push_back(time_ms(stream, start, stop, [&] {
                pasa::cuda::launch_fwd_variant(p, B, D, static_cast<FwdVariant>(vi), stream);
              }));
            }
          }
        } catch (const pasa::Error& e) {
          std::fprintf(stderr, "variants D%d S%d: %s\n", D, S, e.what());
          continue;
        }
        for (int vi = 0; vi < kVariants; ++vi) {
          const double ms = median_ms(times[vi]);
          const double flops = 4.0 * B * H * static_cast<double>(S) * S * D * (causal ? 0.5 : 1.0);
          const std::string name = std::string("x:") + names[vi];
          points.push_back({name, "fp16", D, H, S, B, causal, ms, flops / (ms * 1e-3) / 1e12});
          const Point& pt = points.back();
          const float tolerance = vi == static_cast<int>(FwdVariant::half_block_n) ? 1e-2f : 0.0f;
          std::printf("%-14s fp16 D%-3d H%-2d S%-5d B%-2d %-6s %9.3f ms %7.1f TFLOP/s  max|O - tuned| %.3g%s\n",
                      pt.method.c_str(), D, H, S, B, causal ? "causal" : "full", ms, pt.tflops, diffs[vi],
                      diffs[vi] > tolerance ? "  MISMATCH" : "");
        }
        std::fflush(stdout);
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
    r.diag = 0.0883f;
    r.off = -0.000687f;
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
    const double ms = median_ms(times);
    std::printf("pasa-prepass   fp16 D%-3d H%-2d S%-5d B%-2d %9.4f ms %6.2f TB/s (K read + tiles written)\n", D, H,
                S, B, ms, (2.0 * n + static_cast<double>(tile_bytes)) / (ms * 1e-3) / 1e12);
  }
  cudaFree(o_ref);
  cudaFree(d_diff);
  free_prefill_buffers();

  bench_decode(stream, start, stop, points, kWarmup, kRuns);

  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  write_csv(csv_path, points);
  return 0;
}
