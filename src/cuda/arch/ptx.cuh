// SPDX-License-Identifier: Apache-2.0
// Thin wrappers over the PTX instructions the sm_80+ attention kernels use: the m16n8k16 tensor-core
// MMA (fp16 / bf16 operands, fp32 accumulators), ldmatrix, and cp.async with zero fill; and the bit
// casts between a register of two 16-bit elements and its typed view.
//
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 (the "group") and t = lane % 4 (thread in group):
//   A (16 x 16, row-major)   a0: (g, 2t..2t+1)    a1: (g+8, 2t..)    a2: (g, 2t+8..)   a3: (g+8, 2t+8..)
//   B (16 x 8, "col")        b0: (k 2t..2t+1, n g)  b1: (k 2t+8.., n g)
//   C (16 x 8, fp32)         c0,c1: (g, 2t..2t+1)   c2,c3: (g+8, 2t..2t+1)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace pasa::cuda {

// The 16-bit element types the MMA takes.
template <typename T>
struct MmaType;
template <>
struct MmaType<__half> {
  static constexpr bool is_bf16 = false;
};
template <>
struct MmaType<__nv_bfloat16> {
  static constexpr bool is_bf16 = true;
};

// D = A B + D for one 16 x 8 x 16 tile; Elem selects the operand type.
template <typename Elem>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (MmaType<Elem>::is_bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// Two 8 x 8 b16 matrices; lanes 0-15 give the row addresses (as for the first two matrices of .x4).
__device__ __forceinline__ void ldmatrix_x2(std::uint32_t (&r)[2], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}

// The same, each matrix transposed on the way (for a row-major B operand such as V).
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte global -> shared copy; when `valid` is false nothing is read and the 16 bytes are zeroed.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

// The same with an L2 prefetch size hint (kPrefetch = 64, 128 or 256 bytes; 0: none).
template <int kPrefetch>
__device__ __forceinline__ void cp_async_16_hint(std::uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  if constexpr (kPrefetch == 0) {
    cp_async_16(dst, src, valid);
  } else if constexpr (kPrefetch == 64) {
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  } else if constexpr (kPrefetch == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  } else {
    static_assert(kPrefetch == 256, "L2 prefetch hint of 0, 64, 128 or 256 bytes");
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Two floats rounded (to nearest even) into one register of two 16-bit elements, low half first.
template <typename Elem>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (MmaType<Elem>::is_bf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

// pack2 with values past Elem's largest finite value saturated to it (NaN stays NaN): the conversion's
// .satfinite, the same one instruction.
template <typename Elem>
__device__ __forceinline__ std::uint32_t pack2_satfinite(float lo, float hi) {
  std::uint32_t d;  // (the first source goes to the upper half)
  if constexpr (MmaType<Elem>::is_bf16) {
    asm("cvt.rn.satfinite.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
  }
  return d;
}

// 2^x by the special-function unit (ex2.approx.ftz: about 2 ulp; results below 2^-126 flush to 0,
// far under anything fp16 / bf16 P or an fp32 row sum can hold next to its maximum term, 1).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A register of two fp16 values, as the typed pair and back (low half = first element).
__device__ __forceinline__ __half2 as_half2(std::uint32_t x) {
  __half2 h;
  static_assert(sizeof(h) == sizeof(x));
  __builtin_memcpy(&h, &x, sizeof(x));
  return h;
}

__device__ __forceinline__ std::uint32_t as_u32(__half2 h) {
  std::uint32_t x;
  __builtin_memcpy(&x, &h, sizeof(x));
  return x;
}

// A register of two bf16 values rounded to two fp16 values (the pasa and fdpp policies' input format).
__device__ __forceinline__ std::uint32_t bf16x2_to_half2(std::uint32_t x) {
  __nv_bfloat162 b;
  __builtin_memcpy(&b, &x, sizeof(b));
  return as_u32(__float22half2_rn(__bfloat1622float2(b)));
}

// Two fp16 ones: the pasa mainloop's all-ones B tile, whose product with A puts each row's sum of A
// in every column.
constexpr std::uint32_t kOnesHalf2 = 0x3C003C00u;

// fl_fp16(x) as a float: the rounding points of the fp16 policies.
__device__ __forceinline__ float round_fp16(float x) { return __half2float(__float2half_rn(x)); }
// round_fp16 with a finite x past fp16's range saturated at its largest value, +-65504 (inf and NaN kept).
__device__ __forceinline__ float round_fp16_satfinite(float x) {
  const bool past = fabsf(x) > 65504.0f && fabsf(x) != INFINITY;
  return round_fp16(past ? copysignf(65504.0f, x) : x);
}

// fl16(s x) for each half of the fp16 pair x, rounded once from the exact product (the fp32 multiply
// alone would round it first: a double rounding, one fp16 ulp off where the fp32 product lands on a
// midpoint). The product is rounded to fp32 toward zero and its last bit set when that dropped
// anything (round to odd, exact remainder from an FMA): with 13 bits to spare, rounding that to fp16
// gives what rounding the exact product gives.
__device__ __forceinline__ float mul_round_to_odd(float a, float b) {
  const float p = __fmul_rz(a, b);
  return fmaf(a, b, -p) == 0.0f ? p : __int_as_float(__float_as_int(p) | 1);
}
__device__ __forceinline__ __half2 scale_half2_once(float s, __half2 x) {
  const float2 f = __half22float2(x);
  return __floats2half2_rn(mul_round_to_odd(s, f.x), mul_round_to_odd(s, f.y));
}

// fl16(fl16(ep o) + fl16(ec pv)), each product rounded once from its exact value (pasa_accurate's O~
// update). Usually one factor is exactly 1 (the smaller of two candidate maxima is scaled down, the
// larger by 1; a row that sees no key has ep = 1, ec = 0): the product by 1 is exact, so only the other
// is taken, half the work of two scale_half2_once. Where the state update took headroom
// (numerics/pasa_headroom.h) both factors are below 1 and both products are taken.
__device__ __forceinline__ __half2 rescale_add_half2_once(float ep, __half2 o, float ec, __half2 pv) {
  if (ep != 1.0f && ec != 1.0f) return __hadd2(scale_half2_once(ep, o), scale_half2_once(ec, pv));
  const bool keep_o = ep == 1.0f;
  return __hadd2(scale_half2_once(keep_o ? ec : ep, keep_o ? pv : o), keep_o ? o : pv);
}

// A counter between CTAs: the writer's earlier writes are visible to a reader that sees its addition
// (red.release / ld.acquire at GPU scope).
__device__ __forceinline__ void add_release_gpu(std::uint32_t* counter, std::uint32_t value) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(counter), "r"(value) : "memory");
}
__device__ __forceinline__ std::uint32_t load_acquire_gpu(const std::uint32_t* flag) {
  std::uint32_t value;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(value) : "l"(flag) : "memory");
  return value;
}

// A relaxed load at the GPU's scope: coherent with other SMs' writes (never a stale L1 line), for a
// value whose writes an earlier acquire or barrier already ordered before it.
__device__ __forceinline__ float load_relaxed_gpu(const float* at) {
  float value;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];\n" : "=f"(value) : "l"(at) : "memory");
  return value;
}

// Orders this thread's view of global memory (what it wrote, or acquired from other threads) before
// the async-proxy reads it issues next (bulk copies, TMA).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Programmatic dependent launch (sm_90; a no-op where compiled for an earlier architecture, or where
// the grid was launched without the attribute, launch_dependent.h). A grid launched as a dependent may
// start while the grid before it in the stream finishes: wait_for_previous_grid() blocks until that
// grid has completed and its writes are visible, so it must come before the first global read or
// write. allow_dependent_grid() lets the next grid (if launched as a dependent) start its CTAs once
// every CTA of this one has called it or exited.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace pasa::cuda
