// SPDX-License-Identifier: Apache-2.0
// The exact forward kernel's tile table: one constexpr shape per head dim, and the few named
// variants the benchmark times against it. Plain C++ (no CUDA): the host dispatch, the kernel
// and the benchmark all read it.
//
// A CTA is kWarps warps; each warp owns kMTiles m16 row tiles (16 * kMTiles query rows), so a CTA
// covers kBlockM = 16 * kMTiles * kWarps rows. K and V tiles of kBlockN keys stream through kStages
// shared-memory buffers each. Why these shapes (H200, mma.sync m16n8k16; bench/NOTES.md has the
// numbers): two m-tiles per warp make every K / V fragment read from shared memory feed two MMAs
// instead of one (shared-memory bytes per MMA 256 -> 160 at head dim 128: +26% on an H200). Two
// stages (the loads of key block j + 1 under all of block j, one barrier per block) are supported
// and measured no faster than one for exact: at two CTAs per SM the other CTA hides the loads.
#pragma once

namespace pasa::cuda {

// How O leaves the CTA: staged through shared memory as 16-byte coalesced rows (16-bit outputs), or
// stored straight from the MMA accumulator layout (4 bytes per thread per store).
enum class Epilogue : int { direct = 0, staged = 1 };

struct FwdTile {
  int head_dim;
  int block_n;    // keys per K / V tile
  int m_tiles;    // m16 row tiles per warp
  int warps;      // warps per CTA
  int stages;     // shared-memory buffers per K and per V tile: 1 (V_j loads under Q K_j^T, K_j+1
                  // under P V_j, two barriers per block) or 2 (K, V_j+1 load under all of block j)
  Epilogue epilogue;
  bool swizzled_kv;  // K / V rows in shared memory unpadded and swizzled, else padded (smem_rows.cuh)

  constexpr int block_m() const { return 16 * m_tiles * warps; }
  constexpr int threads() const { return 32 * warps; }
  constexpr int min_ctas_per_sm() const { return warps >= 8 ? 1 : 8 / warps; }  // 8 warps per SM
  constexpr int smem_stride() const { return head_dim + 8; }  // elements a Q row: 16 bytes of padding
  constexpr int kv_row_elems() const { return swizzled_kv ? head_dim : smem_stride(); }
  constexpr int smem_bytes() const {
    return (block_m() * smem_stride() + 2 * stages * block_n * kv_row_elems()) * 2;
  }
};

// The shapes per head dim. D 64 and 128 are tuned (bench/NOTES.md has the measurements behind them,
// H200 2026-11-22): two m-tiles per warp, one stage (two measured no faster: the other CTA on the SM
// already hides the loads), O staged through shared memory except at D 128, where the direct stores
// measured 0-3% faster. D 96 and 256 are not measured, only sized: D 96 takes D 128's shape (its O
// accumulators are smaller); at D 256 a warp's O alone is 128 fp32 registers, so one m-tile per warp,
// 32-key tiles and Q read from shared memory each k step keep it within 255 registers without spills
// (ptxas: 224 on sm_80, 240 on sm_90a).
// K and V rows are swizzled wherever the head dim is a multiple of 64 (all but 96): padded rows split
// each warp's copy of a 128-byte line in two, and swizzled ones measured 1.08-1.11x at D 64 and
// 1.00-1.03x at D 128 (H200, bench/NOTES.md, twenty-sixth session).
// Shared memory per CTA: 50 KB (D 64), 53 KB (D 96), 66 KB (D 128), 65 KB (D 256), under the 99 KB
// that every sm_80+ GPU grants a CTA. Registers (<= 255 a thread) allow two CTAs, 8 warps, per SM.
constexpr FwdTile exact_tile(int head_dim) {
  switch (head_dim) {
    case 64: return FwdTile{64, 128, 2, 4, 1, Epilogue::staged, true};
    case 96: return FwdTile{96, 64, 2, 4, 1, Epilogue::direct, false};
    case 256: return FwdTile{256, 32, 1, 4, 1, Epilogue::direct, true};
    default: return FwdTile{128, 64, 2, 4, 1, Epilogue::direct, true};
  }
}

// The shapes of the instantiations with a sliding window, a softcap or an attention mask
// (attention_fwd_kernel.cuh, ScoreMods::all). At D 64 to 128 the tuned shapes hold 255 registers a
// thread already, and the window's bounds and the mask's addresses and reads made ptxas spill 36-104
// bytes there; key tiles of half the keys free a quarter of the scores' registers and keep the two
// m-tiles per warp (no spills, sm_80 and sm_90a). D 256 keeps its shape (no spills).
constexpr FwdTile score_mods_tile(int head_dim) {
  FwdTile t = exact_tile(head_dim);
  if (head_dim != 256) t.block_n /= 2;
  return t;
}

// Variants the benchmark times beside the tuned shapes (f16 inputs; bench/fwd_variants.cu), each one
// lever of bench/NOTES.md changed. `tuned` is exact_tile().
enum class FwdVariant : int {
  tuned = 0,
  other_stages = 1,     // two stages where tuned has one, one where it has two
  v1_shape = 2,         // 1 m-tile per warp, 1 stage, direct epilogue (the v1 structure)
  direct_epilogue = 3,  // O stored from the accumulator layout (staged where tuned is direct)
  warps8 = 4,           // 8 warps (256 query rows) per CTA sharing each K / V tile, one CTA per SM
  half_block_n = 5,     // key tiles of half the keys
  padded_kv = 6,        // K / V rows padded by 16 bytes instead of swizzled
};
constexpr int kFwdVariants = 7;

constexpr FwdTile variant_tile(FwdTile t, FwdVariant v) {
  switch (v) {
    case FwdVariant::tuned: break;
    case FwdVariant::other_stages: t.stages = 3 - t.stages; break;
    case FwdVariant::v1_shape: t.m_tiles = 1; t.stages = 1; t.epilogue = Epilogue::direct; break;
    case FwdVariant::direct_epilogue:
      t.epilogue = t.epilogue == Epilogue::direct ? Epilogue::staged : Epilogue::direct;
      break;
    case FwdVariant::warps8: t.warps = 8; break;
    case FwdVariant::half_block_n: t.block_n /= 2; break;
    case FwdVariant::padded_kv: t.swizzled_kv = false; break;
  }
  return t;
}

}  // namespace pasa::cuda
