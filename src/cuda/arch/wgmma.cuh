// SPDX-License-Identifier: Apache-2.0
// Hopper's warpgroup MMA (wgmma, sm_90a) as the sage8 kernel and the pasa mainloop use it: A from registers (the
// same per-warp fragment layout as mma.sync m16n8k32 for 8-bit types and m16n8k16 for fp16: warp w of
// the warpgroup holds rows 16 w .. 16 w + 15),
// B from shared memory through a matrix descriptor, accumulators in registers in the mma.sync C layout
// repeated over the N / 8 column tiles (d[4 j + i]: row g + 8 (i / 2), column 8 j + 2 t + i % 2).
//
// Shared-memory operands are K-major tiles whose rows are exactly one swizzle atom wide (64 or 128
// bytes), stored with the hardware's XOR swizzle (16-byte chunk index ^= row bits) so that the eight
// rows a core matrix reads fall into different banks; for fp16 also MN-major tiles (mn_major_desc);
// and unswizzled tiles of ones (plain_desc: fp16 for pasa's row sums, e4m3 for sage8's). PTX ISA:
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions", "Matrix Descriptor Format",
// "Shared Memory Matrix Layout".
#pragma once

#include <cstdint>

#include "cuda/arch/wgmma_operands.h"

namespace pasa::cuda {

// Byte offset inside a tile of rows `kRowBytes` wide (64 or 128) where logical byte offset `off` is
// stored: bits [4, 4 + n) of the offset are XORed with bits [7, 7 + n), n = 2 (64 B) or 3 (128 B). The
// tile must start on a multiple of 8 rows' bytes (the swizzle repeats every 512 or 1024 bytes).
template <int kRowBytes>
__device__ __forceinline__ std::uint32_t swizzled_offset(std::uint32_t off) {
  static_assert(kRowBytes == 64 || kRowBytes == 128, "swizzle atoms of 64 or 128 bytes");
  constexpr std::uint32_t kMask = kRowBytes == 128 ? 7u : 3u;
  return off ^ (((off >> 7) & kMask) << 4);
}

// The descriptor of a K-major tile at shared address `addr` (aligned to 8 rows), rows kRowBytes wide:
// start address >> 4 in bits 0-13, leading byte offset (unused for swizzled K-major, 1 by convention)
// in bits 16-29, stride byte offset (8 rows) >> 4 in bits 32-45, swizzle mode in bits 62-63 (1: 128 B,
// 2: 64 B). Adding n to the descriptor moves its start n * 16 bytes along K.
template <int kRowBytes>
__device__ __forceinline__ std::uint64_t kmajor_desc(std::uint32_t addr) {
  constexpr std::uint64_t kMode = kRowBytes == 128 ? 1 : 2;
  constexpr std::uint64_t kStride = 8 * kRowBytes;
  return static_cast<std::uint64_t>((addr >> 4) & 0x3FFFu) | (std::uint64_t{1} << 16) | ((kStride >> 4) << 32) |
         (kMode << 62);
}

// The descriptor of an MN-major tile (B stored [K rows][N], the layout a row-major V tile has as the
// B of P V) at `addr`: rows of 64 fp16 (128 bytes) with the 128-byte swizzle, 8-row groups along K
// 1024 bytes apart (stride byte offset), and column atoms of 64 along N `atom_bytes` apart (leading
// byte offset). Adding n moves the start n * 16 bytes: a k16 step is 2048 bytes, n = 128.
__device__ __forceinline__ std::uint64_t mn_major_desc(std::uint32_t addr, std::uint32_t atom_bytes) {
  return static_cast<std::uint64_t>((addr >> 4) & 0x3FFFu) | (static_cast<std::uint64_t>((atom_bytes >> 4) & 0x3FFFu) << 16) |
         (std::uint64_t{1024 >> 4} << 32) | (std::uint64_t{1} << 62);
}

// The descriptor of a small K-major tile without swizzle (core matrices of 8 rows x 16 bytes, the two
// of a 32-byte K step 128 bytes apart, 8-row groups 256 bytes apart): used for a tile whose every
// element is the same (the pasa and sage8 mainloops' tiles of ones), where only the addresses' range
// matters.
__device__ __forceinline__ std::uint64_t plain_desc(std::uint32_t addr) {
  return static_cast<std::uint64_t>((addr >> 4) & 0x3FFFu) | (std::uint64_t{128 >> 4} << 16) |
         (std::uint64_t{256 >> 4} << 32);
}

// Orders this thread's earlier register writes (A fragments, accumulators) before the next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// Pins registers at this point of the program. To the compiler a wgmma asm statement reads its A
// fragments and writes its accumulators when it is issued, so it may move accumulator reads above the
// wgmma_wait that makes them valid, or reuse an A fragment's registers while the MMA still reads them.
// Call it on both right after the wait.
__device__ __forceinline__ void wgmma_pin(int& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void wgmma_pin(std::uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void wgmma_pin(float& r) { asm volatile("" : "+f"(r)::"memory"); }
template <typename T, int N>
__device__ __forceinline__ void wgmma_pin(T (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) wgmma_pin(r[i]);
}

// Makes this thread's generic-proxy shared-memory writes (st.shared, completed cp.async) visible to
// the async proxy that wgmma reads through; a barrier then publishes them to the warpgroup.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// D (+)= A B for one 64 x N x 32 step; `accumulate` false overwrites D (accumulator operands:
// wgmma_operands.h).
__device__ __forceinline__ void wgmma_s8_m64n128k32(int (&d)[64], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {" PASA_WGMMA_ACC_TEXT_64 "}, "
               "{%64, %65, %66, %67}, %68, p;\n}\n"
               : PASA_WGMMA_S32_64(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// A from shared memory too (K-major, desc_a).
__device__ __forceinline__ void wgmma_s8_m64n128k32_ss(int (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                       bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {" PASA_WGMMA_ACC_TEXT_64 "}, "
               "%64, %65, p;\n}\n"
               : PASA_WGMMA_S32_64(d)
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_e4m3_m64n64k32(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                     bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {" PASA_WGMMA_ACC_TEXT_32 "}, "
               "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
               : PASA_WGMMA_F32_32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_e4m3_m64n128k32(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                      bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" PASA_WGMMA_ACC_TEXT_64 "}, "
               "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
               : PASA_WGMMA_F32_64(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// A from shared memory too (K-major, desc_a): the sage_fp8 policy's Q8 K8^T.
__device__ __forceinline__ void wgmma_e4m3_m64n128k32_ss(float (&d)[64], std::uint64_t desc_a, std::uint64_t desc_b,
                                                         bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" PASA_WGMMA_ACC_TEXT_64 "}, "
               "%64, %65, p, 1, 1;\n}\n"
               : PASA_WGMMA_F32_64(d)
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// e4m3 A and B, fp32 accumulators: D (+)= A B for one 64 x 8 x 32 step (the sage8 mainloop's row sums
// of P~ against a tile of ones). B is K-major.
__device__ __forceinline__ void wgmma_e4m3_m64n8k32(float (&d)[4], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, %8, p, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// fp16 A and B, fp32 accumulators: D (+)= A B for one 64 x 8 x 16 step (the pasa mainloop's row sums
// of P against a tile of ones; the wider 16-bit shapes are in wgmma_16bit.cuh). B is K-major, or with
// kTransB MN-major (a tile stored [K][N], mn_major_desc).
template <bool kTransB = false>
__device__ __forceinline__ void wgmma_f16_m64n8k16(float (&d)[4], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
      "{"
      "%0, %1, %2, %3"
      "}, {%4, %5, %6, %7}, %8, p, 1, 1, %10;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
}

}  // namespace pasa::cuda
