// SPDX-License-Identifier: Apache-2.0
// Hopper's warpgroup MMA on fp16 operands into fp16 accumulators (pasa_fp16acc's P V and its row sums):
// D (+)= A B for one 64 x N x 16 step, A from registers (the mma.sync m16n8k16 fragment layout), B from
// shared memory through a descriptor (wgmma.cuh), MN-major with kTransB. The accumulators are fp16
// pairs: d[2 j + i] holds row g + 8 i, columns 8 j + 2 t and 8 j + 2 t + 1 (wgmma.cuh's fp32 layout,
// its pairs packed). How a step adds into them is the emulator's mma_k = 16 (src/cpu/gemm_model.h),
// which tests/cuda/test_mma_step.cu holds to the hardware. `accumulate` false overwrites D.
#pragma once

#include <cstdint>

namespace pasa::cuda {

#define PASA_WGMMA_F16ACC_TEXT_16 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define PASA_WGMMA_F16ACC_TEXT_32                                                                   \
  PASA_WGMMA_F16ACC_TEXT_16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, " \
                            "%30, %31"
#define PASA_WGMMA_F16ACC_REGS_16(d)                                                                        \
  "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), \
      "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
#define PASA_WGMMA_F16ACC_REGS_32(d)                                                                           \
  PASA_WGMMA_F16ACC_REGS_16(d), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]),   \
      "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), \
      "+r"(d[30]), "+r"(d[31])

template <bool kTransB>
__device__ __forceinline__ void wgmma_f16acc_m64n64k16_rs(std::uint32_t (&d)[16], const std::uint32_t (&a)[4],
                                                          std::uint64_t desc_b, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16 {" PASA_WGMMA_F16ACC_TEXT_16 "}, "
               "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
               : PASA_WGMMA_F16ACC_REGS_16(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)),
                 "n"(kTransB ? 1 : 0));
}

template <bool kTransB>
__device__ __forceinline__ void wgmma_f16acc_m64n128k16_rs(std::uint32_t (&d)[32], const std::uint32_t (&a)[4],
                                                           std::uint64_t desc_b, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f16.f16.f16 {" PASA_WGMMA_F16ACC_TEXT_32 "}, "
               "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
               : PASA_WGMMA_F16ACC_REGS_32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)),
                 "n"(kTransB ? 1 : 0));
}

// The row sums of A against a K-major tile of ones (plain_desc): every column of D the same sum.
__device__ __forceinline__ void wgmma_f16acc_m64n8k16(std::uint32_t (&d)[2], const std::uint32_t (&a)[4],
                                                      std::uint64_t desc_b, bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %7, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, %6, p, 1, 1, 0;\n}\n"
               : "+r"(d[0]), "+r"(d[1])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

#undef PASA_WGMMA_F16ACC_TEXT_16
#undef PASA_WGMMA_F16ACC_TEXT_32
#undef PASA_WGMMA_F16ACC_REGS_16
#undef PASA_WGMMA_F16ACC_REGS_32

}  // namespace pasa::cuda
