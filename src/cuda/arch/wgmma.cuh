// SPDX-License-Identifier: Apache-2.0
// Hopper's warpgroup MMA (wgmma, sm_90a) as the sage8 kernel and the pasa mainloop use it: A from registers (the
// same per-warp fragment layout as mma.sync m16n8k32 for 8-bit types and m16n8k16 for fp16: warp w of
// the warpgroup holds rows 16 w .. 16 w + 15),
// B from shared memory through a matrix descriptor, accumulators in registers in the mma.sync C layout
// repeated over the N / 8 column tiles (d[4 j + i]: row g + 8 (i / 2), column 8 j + 2 t + i % 2).
//
// Shared-memory operands are K-major tiles whose rows are exactly one swizzle atom wide (64 or 128
// bytes), stored with the hardware's XOR swizzle (16-byte chunk index ^= row bits) so that the eight
// rows a core matrix reads fall into different banks; for fp16 also MN-major tiles (mn_major_desc)
// and an unswizzled tile of ones (plain_desc). PTX ISA: "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate Instructions", "Matrix Descriptor Format", "Shared Memory Matrix Layout".
#pragma once

#include <cstdint>

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
// element is the same (the pasa mainloop's matrix of ones), where only the addresses' range matters.
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

// D (+)= A B for one 64 x N x 32 step; `accumulate` false overwrites D. The operand lists are long
// because every accumulator is its own register operand.
__device__ __forceinline__ void wgmma_s8_m64n128k32(int (&d)[64], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_e4m3_m64n64k32(float (&d)[32], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                     bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_e4m3_m64n128k32(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                                      bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
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
