// SPDX-License-Identifier: Apache-2.0
// Hopper's warpgroup MMA on 16-bit operands (fp16 or bf16, fp32 accumulators) for the Hopper attention
// engine: D (+)= A B for one 64 x N x 16 step, A from registers (rs: the P of P V, in the same per-warp
// fragment layout as mma.sync m16n8k16) or from shared memory (ss: the Q of Q K^T), B from shared memory
// through a descriptor (wgmma.cuh), K-major or, with kTransB, MN-major. Accumulators in the layout
// wgmma.cuh describes. `accumulate` false overwrites D.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/arch/wgmma_operands.h"

namespace pasa::cuda {

template <typename Elem>
struct WgmmaType;
template <>
struct WgmmaType<__half> {
  static constexpr bool is_bf16 = false;
};
template <>
struct WgmmaType<__nv_bfloat16> {
  static constexpr bool is_bf16 = true;
};

#define PASA_WGMMA_M64N64K16_RS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" PASA_WGMMA_ACC_TEXT_32 "}, " \
               "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"                                                   \
               : PASA_WGMMA_F32_32(d)                                                                   \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
template <typename Elem, bool kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_rs(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                   bool accumulate) {
  if constexpr (WgmmaType<Elem>::is_bf16) {
    PASA_WGMMA_M64N64K16_RS("bf16");
  } else {
    PASA_WGMMA_M64N64K16_RS("f16");
  }
}
#undef PASA_WGMMA_M64N64K16_RS

#define PASA_WGMMA_M64N64K16_SS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {" PASA_WGMMA_ACC_TEXT_32 "}, " \
               "%32, %33, p, 1, 1, 0, %35;\n}\n"                                                   \
               : PASA_WGMMA_F32_32(d)                                                                   \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
template <typename Elem, bool kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], std::uint64_t desc_a, std::uint64_t desc_b,
                                                   bool accumulate) {
  if constexpr (WgmmaType<Elem>::is_bf16) {
    PASA_WGMMA_M64N64K16_SS("bf16");
  } else {
    PASA_WGMMA_M64N64K16_SS("f16");
  }
}
#undef PASA_WGMMA_M64N64K16_SS

#define PASA_WGMMA_M64N128K16_RS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" PASA_WGMMA_ACC_TEXT_64 "}, " \
               "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"                                                   \
               : PASA_WGMMA_F32_64(d)                                                                   \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
template <typename Elem, bool kTransB>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                   bool accumulate) {
  if constexpr (WgmmaType<Elem>::is_bf16) {
    PASA_WGMMA_M64N128K16_RS("bf16");
  } else {
    PASA_WGMMA_M64N128K16_RS("f16");
  }
}
#undef PASA_WGMMA_M64N128K16_RS

#define PASA_WGMMA_M64N128K16_SS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {" PASA_WGMMA_ACC_TEXT_64 "}, " \
               "%64, %65, p, 1, 1, 0, %67;\n}\n"                                                   \
               : PASA_WGMMA_F32_64(d)                                                                   \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
template <typename Elem, bool kTransB>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                   bool accumulate) {
  if constexpr (WgmmaType<Elem>::is_bf16) {
    PASA_WGMMA_M64N128K16_SS("bf16");
  } else {
    PASA_WGMMA_M64N128K16_SS("f16");
  }
}
#undef PASA_WGMMA_M64N128K16_SS

#define PASA_WGMMA_M64N136K16_RS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %73, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n136k16.f32." TYPE "." TYPE " {" PASA_WGMMA_ACC_TEXT_68 "}, " \
               "{%68, %69, %70, %71}, %72, p, 1, 1, %74;\n}\n"                                                   \
               : PASA_WGMMA_F32_68(d)                                                                   \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
template <typename Elem, bool kTransB>
__device__ __forceinline__ void wgmma_m64n136k16_rs(float (&d)[68], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                   bool accumulate) {
  if constexpr (WgmmaType<Elem>::is_bf16) {
    PASA_WGMMA_M64N136K16_RS("bf16");
  } else {
    PASA_WGMMA_M64N136K16_RS("f16");
  }
}
#undef PASA_WGMMA_M64N136K16_RS

#define PASA_WGMMA_M64N136K16_SS(TYPE)                                                                      \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n136k16.f32." TYPE "." TYPE " {" PASA_WGMMA_ACC_TEXT_68 "}, " \
               "%68, %69, p, 1, 1, 0, %71;\n}\n"                                                   \
               : PASA_WGMMA_F32_68(d)                                                                   \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0))
template <typename Elem, bool kTransB>
__device__ __forceinline__ void wgmma_m64n136k16_ss(float (&d)[68], std::uint64_t desc_a, std::uint64_t desc_b,
                                                   bool accumulate) {
  if constexpr (WgmmaType<Elem>::is_bf16) {
    PASA_WGMMA_M64N136K16_SS("bf16");
  } else {
    PASA_WGMMA_M64N136K16_SS("f16");
  }
}
#undef PASA_WGMMA_M64N136K16_SS

}  // namespace pasa::cuda
