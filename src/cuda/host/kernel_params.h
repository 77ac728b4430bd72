// SPDX-License-Identifier: Apache-2.0
// What the host passes to the forward attention kernels, and the launch functions the dispatcher
// calls (one per explicit instantiation family). Plain C++: included by .cpp and .cu files alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/host/fwd_tiles.h"

namespace pasa::cuda {

// The longest query or key sequence the kernels take (their rows and keys are ints, and S_q + S_kv
// stays within one).
constexpr std::int64_t kMaxSeq = std::int64_t{1} << 30;

// The element types the kernels read and write.
enum class ElemType : int { f32 = 0, f16 = 1, bf16 = 2 };

// What an attention mask holds: nothing, bytes (nonzero: the key takes part) or additive values.
enum class MaskType : int { none = 0, boolean = 1, add_f32 = 2, add_f16 = 3, add_bf16 = 4 };

// A [B, H, S, D] operand: base pointer and element strides of the batch, head and sequence
// dimensions (the head-dim stride is 1, checked by the dispatcher).
struct Operand {
  const void* data;
  std::int64_t stride_b, stride_h, stride_s;
};

struct FwdParams {
  Operand q;  // Q as given (f16 / bf16)
  Operand k;  // K as given (pasa: read by its prepass, which writes K')
  Operand v;  // V as given (pasa: read by the kernel's TMA if fp16, by the prepass if bf16)
  void* o;
  std::int64_t o_stride_b, o_stride_h, o_stride_s;
  ElemType o_type;
  float* lse;  // null: not written
  std::int64_t lse_stride_b, lse_stride_h, lse_stride_s;

  int seq_q, seq_kv, heads_q, group;  // group = H_q / H_kv
  bool causal;
  int causal_offset;  // key k is visible to query r iff k <= r + causal_offset (when causal)
  // Sliding window (flash-attn's window_size) around the same diagonal: query r sees keys
  // r + causal_offset - window_left .. r + causal_offset + window_right; -1: that side unbounded.
  // The window, the softcap and the mask: the exact kernels only (the dispatch checks).
  int window_left = -1, window_right = -1;
  // Logit softcap: > 0 turns the scaled scores s into softcap tanh(s / softcap); softcap_scale =
  // |alpha| / softcap (the kernels' raw scores carry alpha's sign: the portable one flips Q for a
  // negative alpha).
  float softcap = 0.0f, softcap_scale = 0.0f;
  // attn_mask: element (b, h, row, key) at mask + b mask_stride_b + h mask_stride_h +
  // row mask_stride_s + key mask_stride_k (stride 0 on a broadcast axis). Boolean: a zero byte hides the
  // key; additive: the value times mask_scale is added to the score as the kernel holds it (raw
  // scores: log2(e) / scale_log2, i.e. 1 / |alpha|; soft-capped ones: 1).
  const void* mask = nullptr;
  MaskType mask_type = MaskType::none;
  std::int64_t mask_stride_b = 0, mask_stride_h = 0, mask_stride_s = 0, mask_stride_k = 0;
  float mask_scale = 1.0f;
  // additive: a finite value never takes a score below this, -2^20 in the softmax's base-2 units (or
  // -FLT_MAX where that is past it). A padding mask of fp32's minimum, times 1 / |alpha|, overflowed to
  // -inf and hid a row it masks whole, which exact attention (and the emulator) averages over the
  // row's keys. The floor is below fp16's minimum as a mask (-65504 log2 e), which keeps the scores'
  // differences, and high enough that the exponent's FMA, subtracting the row's maximum, leaves a
  // residual of at most 2^-4 (half an ulp of 2^20): a row masked whole gets equal weights, each P at
  // most 2^(1/16), which the input dtype holds.
  float mask_floor = -3.402823466e38f;

  float scale_log2;  // exact: |alpha| * log2(e) (> 0: a zero alpha is passed as 1e-30), scores are
                     // exponentiated in base 2
  bool negate_q;     // exact: alpha < 0; the kernel flips Q's sign so that it scales by |alpha|
  float pasa_g;      // pasa: the invariance G of the stored M (numerics/pasa_shift.h), in fp32

  // A sliding window, a softcap or an attention mask: the scores take more than the causal and
  // sequence-end masks.
  bool has_score_mods() const {
    return window_left >= 0 || window_right >= 0 || softcap > 0.0f || mask_type != MaskType::none;
  }
};

// The head dims each family of kernels is built for (the decode kernel's: decode_params.h).
constexpr int kPortableHeadDims[] = {64, 96, 128, 256};
constexpr int kHopperHeadDims[] = {64, 128};

// SageAttention2's 8-bit kernel (the sage8 preset, algorithms.md section 4): key blocks of s2 = 128 keys (the
// INT8 K groups and the two-level PV accumulation follow them); any s1, each row's state is its own.
constexpr int kSage8BlockKv = 128;

// A call as the kernels that allocate scratch or choose their own grid (sage8, decode) see it:
// FwdParams (whose q, k, v are the inputs as given) and the shape and device around it.
struct KernelRequest {
  FwdParams fwd;
  int batch, heads_kv, head_dim;
  ElemType in_type;
  int device;    // for the scratch pool
  int sm_count;  // the device's multiprocessors (persistent grids), read once per device by the dispatch
  long long l2_bytes;  // the device's L2 size (the persistent scheduler's sections), read likewise
  double alpha;  // the softmax scale as given (any sign)
  bool dependent_launch;  // the device runs the kernels' sm_90a code, so a kernel may be launched as
                          // a programmatic dependent of the one before it (launch_dependent.h)
  std::uint64_t* tile_tickets;  // the sm_90a prefill kernels' tile counter, in the call's workspace
};

// The workspace of an sm_90a prefill call: its tile counter (launch_counter.cuh), in the 256-byte
// granule of every workspace.
constexpr std::size_t kTileTicketBytes = 256;

// The 8-bit codes of Q and K in the sage8 engine's Q K^T (sage8_qk_codes.cuh): INT8 for the sage8
// preset, e4m3 for sage_fp8.
enum class QkCodes { int8, e4m3 };
struct Sage8Request : KernelRequest {
  QkCodes qk_codes = QkCodes::int8;
};

// The pasa kernel's key block: PASA's s2 (the policy's block_kv must equal it).
constexpr int kPasaBlockKv = 128;
// The key blocks pasa_fp16acc's fp16 accumulator sums before they go into O~ (the policy's pv_blocks
// must equal it).
constexpr int kPasaPvBlocks = 4;

// The units of the pasa kernels' scores: the pasa preset's are base 2 (exp_base=2: log2 e folded into
// M with alpha, P = 2^x), pasa_accurate's natural (policy.cpp says why); the dispatch admits a pasa
// policy only with its preset's exp_base (policy_family.cpp).
constexpr bool pasa_base2(bool accurate) { return !accurate; }

// pasa (Algorithm 1, algorithms.md section 3): the call and PASA's M = (I - beta/s2 J) alpha u (u = log2 e
// or 1, pasa_base2) as its stored fp16 entries (every key block, a short last one padded, has
// s2 = kPasaBlockKv keys); call.fwd.pasa_g carries the invariance G. accurate: the pasa_accurate
// policy (S' and the softmax state in fp32). mean_key_factor: pseudo_avg=k, M's row sum (the
// pseudo-average is Q times it times the block's mean key); 0 for pseudo_avg=s (the mean of the
// stored K' rows). fp16_accumulator: the pasa_fp16acc policy (P V in fp16 accumulators, sm_90a only).
struct PasaRequest {
  KernelRequest call;
  float diag, off;
  float mean_key_factor;
  bool accurate;
  bool fp16_accumulator;
};

// The portable pasa kernel's CTA (attention_fwd_pasa_portable.cu): 8 warps of one m16 row tile each
// (128 query rows), key blocks of s2 = kPasaBlockKv keys. Its K' and V tiles stream through two
// shared-memory slots of kKRows rows (the keys, then the prepass's 8 mean rows for K'), rows padded
// by 16 bytes, in slices of slice_dim() channels: the whole head up to 128 channels (K'_j in one slot,
// V_j in the other), two slices of 128 at head dim 256 (K'_j's two slices, then V_j's), so that the
// slots stay under the 99 KB that every sm_80+ GPU grants a CTA: 38, 55, 72 and 72 KB at head dims
// 64, 96, 128 and 256. Q's slices pass through the slots first, until every warp holds its Q
// fragments in registers. pv_tiles(): the n8 tiles of O one P V pass accumulates in fp32 before they
// are added into O~ (all of a slice up to 128 channels; 8 at head dim 256, where Q's and O~'s 128
// registers leave too few: ptxas spills 24 bytes for pasa and 104-148 for pasa_accurate there, the
// least of the pass widths tried, bench/NOTES.md).
struct PasaPortableTile {
  int head_dim;
  static constexpr int kWarps = 8;
  static constexpr int kKRows = kPasaBlockKv + 8;  // the keys, then the mean rows (pasa_stage.cuh)
  constexpr int block_m() const { return 16 * kWarps; }
  constexpr int threads() const { return 32 * kWarps; }
  constexpr int slices() const { return head_dim > 128 ? head_dim / 128 : 1; }
  constexpr int slice_dim() const { return head_dim / slices(); }
  constexpr int smem_stride() const { return slice_dim() + 8; }  // elements
  constexpr int slot_elems() const { return kKRows * smem_stride(); }
  constexpr int smem_bytes() const { return 2 * slot_elems() * 2; }
  constexpr int pv_tiles() const { return head_dim > 128 ? 8 : slice_dim() / 8; }
};
// Launch functions (defined in the .cu files). Each throws pasa::Error on a CUDA error; `stream` is
// a cudaStream_t. Two families: the portable kernels (sm_80 instructions, compiled for every
// architecture of the build) and the sm_90a ones (wgmma, TMA; compiled for the build's 90a entries
// only; without one, hopper_kernels_absent.cpp defines them as errors).
//
// exact, portable: CTA shapes from fwd_tiles.h (batch x heads x ceil(seq_q / block_m) CTAs); head dims
// kPortableHeadDims; any alpha, window, softcap and mask.
void launch_exact_portable_fwd(const FwdParams& p, int batch, int head_dim, ElemType in_type, void* stream);
// exact on the Hopper engine (attention_fwd_hopper.cuh): a persistent grid of min(tiles, sm_count)
// warp-specialized CTAs; head dims kHopperHeadDims, a positive alpha (the portable kernel flips Q for a
// negative one).
void launch_exact_fwd(const KernelRequest& r, void* stream);
// pasa (sm_90a): the prepass (K' = M K in fp16, as tiles; bf16 V to fp16) into scratch from pasa's pool, then the
// Hopper engine's pasa variant; both on `stream`. A request with fp16_accumulator goes to
// launch_pasa_fp16acc, the same launch of the variant whose P V stays in fp16 accumulators.
void launch_pasa(const PasaRequest& r, void* stream);
void launch_pasa_fp16acc(const PasaRequest& r, void* stream);
// pasa, portable: the same prepass (K' only: bf16 V is rounded to fp16 in shared memory), then the
// portable pasa kernel (batch x heads x ceil(seq_q / 128) CTAs); both on `stream`. Head dims
// kPortableHeadDims.
void launch_pasa_portable(const PasaRequest& r, void* stream);
// sage8 and sage_fp8 (sm_90a): the quantization prepass (smooth K, K to r.qk_codes per thread group,
// FP8 V per channel) into scratch from pasa's pool, then the attention kernel (Q to r.qk_codes in it);
// all on `stream`.
void launch_sage8(const Sage8Request& r, void* stream);

// The device memory the pasa and sage8 launches take from pasa's pool for their prepass (beside the
// plan's workspace), from the request's shape: what a caller that must not fail halfway reserves
// first. pasa's counts the prepass inside the sm_90a kernel (hopper), the larger of its two cases.
std::size_t pasa_scratch_bytes(const KernelRequest& c, bool hopper);
std::size_t sage8_scratch_bytes(const Sage8Request& r);

}  // namespace pasa::cuda
