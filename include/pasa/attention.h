// SPDX-License-Identifier: Apache-2.0
// pasa/attention.h — the attention entry points (CPU reference, CPU policy emulator, CUDA kernels).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pasa/policy.h"
#include "pasa/tensor.h"

namespace pasa {

// Causal masking of a rectangular S_q x S_kv problem. Bottom-right: query r sees keys
// k <= r + S_kv - S_q (the default; what decoding with a KV cache needs). Top-left: k <= r
// (PyTorch SDPA's is_causal).
enum class CausalAlignment { bottom_right, top_left };

enum class Backend {
  automatic,  // CUDA kernels for device tensors, the CPU emulator for host tensors
  emulator,   // CPU: the tiled online-softmax loop, rounding as the policy says
  cuda,       // GPU kernels (built with CUDA, run on sm_80 or newer)
};

// Which CUDA kernels a call may use (docs/api.md, "GPU kernels"). automatic: the sm_90a kernels on an
// sm_90 GPU (H100, H200), the portable ones (sm_80 instructions) on every other GPU and wherever the
// environment variable PASA_CUDA_PATH=portable was set when the process first planned. portable: the
// portable kernels on any GPU (the exact, pasa and fdpp policies; not sage8).
enum class CudaPath { automatic, portable };

// An attention mask with torch SDPA's semantics (attn_mask), broadcast over [B, H_q, S_q, S_kv]: shape
// [B or 1, H_q or 1, S_q, S_kv] with element strides (a size-1 batch or head axis broadcasts; a mask
// shared by the queries or keys, a padding mask of torch's shape [B, 1, 1, S_kv] say, is given its
// full S_q or S_kv with stride 0 there, as torch's expand() makes it). Additive (f32, f16 or
// bf16): added to the scaled, soft-capped scores, -inf hides the key. Boolean (one byte each): nonzero
// = the key takes part. CPU backends, and the exact policy's prefill kernels (with Device::cuda data).
enum class MaskKind { none, additive, boolean };
struct MaskView {
  const void* data = nullptr;
  MaskKind kind = MaskKind::none;
  DType dtype = DType::f32;  // of an additive mask
  std::array<std::int64_t, 4> shape{0, 0, 0, 0};
  std::array<std::int64_t, 4> stride{0, 0, 0, 0};
  Device device = Device::cpu;
};

// Counters a run reports when AttentionArgs::stats is set.
struct AttentionStats {
  std::int64_t rows = 0;             // query rows computed
  std::int64_t recomputed_rows = 0;  // rows FlashDecoding++'s unified max sent to the synchronized path
};

struct AttentionArgs {
  TensorView q;  // [B, H_q, S_q, D]
  TensorView k;  // [B, H_kv, S_kv, D]; H_q must be a multiple of H_kv (GQA / MQA)
  TensorView v;  // [B, H_kv, S_kv, D]
  TensorView o;  // [B, H_q, S_q, D], written; f32, f16 or bf16
  LseView lse;   // [B, H_q, S_q] natural-log fp32, written when lse.data is not null

  std::optional<double> scale;  // alpha; 1/sqrt(D) when empty
  bool causal = false;
  CausalAlignment alignment = CausalAlignment::bottom_right;
  // Sliding window (flash-attn's window_size): query r sees key k when o - left <= k <= o + right, o =
  // r + S_kv - S_q (bottom_right) or r (top_left); -1 leaves that side unbounded. Composes with causal.
  std::int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;  // > 0: scaled scores s become softcap * tanh(s / softcap) (Gemma 2)
  MaskView mask;         // optional attn_mask
  Policy policy;                 // "exact" by default
  Backend backend = Backend::automatic;
  CudaPath cuda_path = CudaPath::automatic;
  void* stream = nullptr;        // cudaStream_t for the CUDA backend (nullptr = default stream)
  AttentionStats* stats = nullptr;  // filled (overwritten) when set. On the GPU, reading the recompute
                                    // count of a unified-max (fdpp) call waits for `stream`, so such a
                                    // call cannot be graph-captured with stats set; other calls never wait.
};

// Runs attention as args says. Throws pasa::Error, before touching any output, for bad input: null
// pointers, shapes that disagree, H_q % H_kv != 0, unsupported D (1..1024 on the CPU, 64, 96, 128 or 256 on the GPU) or dtype,
// S = 0, a non-finite scale, non-finite values in Q/K/V (CPU backends check; see docs/api.md), a bad
// window, softcap or mask (and, on the GPU, any of the three with a policy but exact).
// Fully masked rows give O = 0 and LSE = -inf.
void attention(const AttentionArgs& args);

// fp64 attention on the same inputs (rounded to policy.input first), plain and readable: the
// reference every other path is measured against. Output is contiguous [B, H_q, S_q, D] (and
// [B, H_q, S_q] for the LSE). Reads q, k, v, scale, causal, alignment, the window, softcap, mask and
// policy.input; ignores o and lse (they may be left empty).
struct ReferenceResult {
  std::vector<double> o;
  std::vector<double> lse;
};
ReferenceResult reference_attention(const AttentionArgs& args);

// Exact merge of two partial results over disjoint key sets (algorithms.md section 1): o_a, o_b [B, H, S, D]
// f32 with their LSEs; writes o and lse (which may alias a). A row with both LSEs -inf gives O = 0,
// LSE = -inf.
void merge_partials(const TensorView& o_a, const LseView& lse_a, const TensorView& o_b,
                    const LseView& lse_b, const TensorView& o, const LseView& lse);

}  // namespace pasa
