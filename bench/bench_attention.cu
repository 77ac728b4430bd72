// Forward-attention benchmark of pasa's CUDA kernels through the public API (pasa::attention on
// device tensors): exact (fp16, bf16) and pasa (fp16), head dims 64 / 128, S = 1k / 4k / 16k with
// B * S = 32k tokens, H * D = 2048 (16 heads of 128, 32 of 64), causal and not. Each point: 5 warm-up
// calls, then the median of 30 calls timed one by one with CUDA events. TFLOP/s = 4 B H S^2 D / t,
// halved for causal (the convention of docs/performance.md).
//
// Usage: bench_attention [csv_path]   (writes one row per point; prints a table either way)
// Built by scripts/device_run.sh: nvcc ... bench/bench_attention.cu build/libpasa_core.a
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

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

// Uniform values in [-1, 1) from a per-element hash: fresh (seeded) and never zeros.
__global__ void fill_uniform(std::uint16_t* out, std::int64_t n, std::uint64_t seed, bool bf16) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint64_t x = (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;
    if (bf16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(u);
      out[i] = *reinterpret_cast<const std::uint16_t*>(&b);
    } else {
      const __half h = __float2half_rn(u);
      out[i] = *reinterpret_cast<const std::uint16_t*>(&h);
    }
  }
}

struct Point {
  std::string method;
  std::string dtype;
  int D, H, S, B;
  bool causal;
  double ms, tflops;
};

}  // namespace

int main(int argc, char** argv) {
  const char* csv_path = argc > 1 ? argv[1] : nullptr;
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
  };

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
          fill_uniform<<<1024, 256, 0, stream>>>(q, n, ++seed, bf16);
          fill_uniform<<<1024, 256, 0, stream>>>(k, n, ++seed, bf16);
          fill_uniform<<<1024, 256, 0, stream>>>(v, n, ++seed, bf16);
          check(cudaGetLastError(), "fill_uniform");
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
          try {
            for (int i = 0; i < kWarmup; ++i) pasa::attention(args);
            for (int i = 0; i < kRuns; ++i) {
              check(cudaEventRecord(start, stream), "cudaEventRecord");
              pasa::attention(args);
              check(cudaEventRecord(stop, stream), "cudaEventRecord");
              check(cudaEventSynchronize(stop), "cudaEventSynchronize");
              float ms = 0;
              check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
              times.push_back(ms);
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
          std::printf("%-11s %-4s D%-3d H%-2d S%-5d B%-2d %-6s %9.3f ms %7.1f TFLOP/s\n", p.method.c_str(),
                      p.dtype.c_str(), D, H, S, B, causal ? "causal" : "full", ms, p.tflops);
          std::fflush(stdout);
        }
      }
    }
  }
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
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
  cudaFree(lse);
  return 0;
}
