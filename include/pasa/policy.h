// SPDX-License-Identifier: Apache-2.0
// pasa/policy.h — a precision policy: the format at every rounding point of the online-softmax loop,
// where the softmax scale is applied, the shift, and the block sizes (docs/algorithms.md section 2).
//
// Named methods are presets of this one type. A policy prints and parses as text: the preset name,
// then `key=value` for every field that differs from that preset, e.g. "pasa,beta=0.968994,s2=64".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pasa/format.h"
#include "pasa/quantize.h"

namespace pasa {

// Where alpha (the softmax scale) multiplies in.
enum class ScalePlacement {
  scores,  // "s": S = fl_softmax(fl_s(Q K^T) * alpha), after the GEMM (the paper's Eq. 2)
  query,   // "q": Q is pre-scaled, fl_input(alpha * Q), before the GEMM
  key,     // "k": folded into K (for PASA: into the shifting matrix M, as Algorithm 1 does)
};

// What the scores are measured against.
enum class Shift {
  none,     // the running maximum (FlashAttention)
  pasa,     // online pseudo-average shifting (Algorithm 1) with parameter beta
  unified,  // FlashDecoding++: one fixed phi for every split, rows leaving the window recomputed
};

// The units of the scores the softmax keeps, and so the base of its exponentials. Base 2 multiplies
// the softmax scale by log2(e) wherever the scale applies (the scores, Q, or K and PASA's M) and
// takes every exponential as 2^x: a GPU's exponential unit computes 2^x, so a kernel then takes each
// exponential without first multiplying its argument. Every statistic (maxima, shift terms, the
// pseudo-averages) is then held in base-2 units, so their formats' range is 1 / log2(e) = 0.69 as
// wide in natural units; the LSE is returned in natural units either way.
enum class ExpBase {
  e,    // "e": scores in natural units, e^x
  two,  // "2": scores times log2(e), 2^x
};

// What PASA's running state is kept relative to (algorithms.md section 3).
enum class PasaReference {
  maximum,  // "max": the row's running maximum of its recovered scores, m' + G s' a block, in fp32 with
            // the pseudo-averages s': the scores' large common part never meets a narrow format
  average,  // "average": Algorithm 1's G F, F the global pseudo-average (Eq. 15), every term in
            // `softmax`: in fp16, each block's weight moves by G times the rounding of its s'
};

// Where PASA takes a key block's local pseudo-average s' (the mean of its shifted scores) from.
enum class PseudoAverage {
  scores,       // "s": the mean of S' as rounded to `s` (Algorithm 1); it carries the mean of the
                // rounding errors of the stored K' = M K, which the state update multiplies by G ~ 64,
                // and, where S' is large, the rounding of S' itself
  keys,         // "k": Q times M's row sum times the block's mean key: the mean of the S' that an
                // unrounded K' would give, so that only each score's own rounding error remains
  accumulator,  // "acc": the mean of S' as the GEMM accumulated it (in sum_acc), before its rounding
                // to `s`: what a kernel gets from one more GEMM column of the stored K' rows' mean
};

// What a block's row sum l' adds up.
enum class RowSum {
  exponentials,  // "e": the exponentials before P is rounded, in sum_acc (the algorithm as written)
  p,             // "p": P as rounded to `p` (divided by p_scale), in pv_acc: what a column of ones in
                 // the P V GEMM gives, so that O~ and l weigh each key alike
};

struct Policy {
  std::string preset = "exact";  // the preset this policy was derived from (printing starts here)

  Format input = Format::fp32();   // Q, K, V are converted to this on entry ("input")
  Format qk_acc = Format::fp32();  // accumulator inside the Q K^T GEMM ("qk_acc")
  Format s = Format::fp32();       // S as it leaves the Q K^T GEMM ("s")
  ScalePlacement scale = ScalePlacement::scores;  // ("scale" = s | q | k)
  Format softmax = Format::fp32(); // scaled S, max, exp, rowsum, l, m and shift terms ("softmax";
                                   // PASA's m and shift terms with reference=average only)
  ExpBase exp_base = ExpBase::e;   // the softmax's units and exponential: e^x or 2^x ("exp_base" = e | 2)
  Format sum_acc = Format::fp32(); // accumulator of the softmax's row sums (of the exponentials with
                                   // rowsum=e, and PASA's sum of a block's S'): fp32 sums in fp32 and
                                   // rounds once to `softmax`, as a GEMM or a framework's reduction does;
                                   // fp16 adds term by term ("sum_acc")
  Format p = Format::fp32();       // P as the PV GEMM's operand ("p")
  Format pv_acc = Format::fp32();  // accumulator inside the P V GEMM ("pv_acc")
  Format o = Format::fp32();       // P V output, running O~ and its rescale, final O~ / l ("o")
  int mma_k = 0;                   // a GEMM accumulator narrower than fp32 (qk_acc, pv_acc) is rounded
                                   // after every product (0), or once per step of mma_k products, summed
                                   // with it as Hopper's tensor cores sum them (src/cpu/gemm_model.h;
                                   // 16 is wgmma's fp16 step) ("mma_k")

  Shift shift = Shift::none;       // ("shift" = none | pasa | unified)
  double beta = 0.0;               // PASA's beta in [0, 1) ("beta")
  PseudoAverage pseudo_avg = PseudoAverage::scores;  // PASA's local pseudo-average ("pseudo_avg" = s | k | acc)
  PasaReference reference = PasaReference::maximum;  // PASA's running reference ("reference" = max | average)

  int block_q = 64;                // s1: query rows per block ("s1")
  int block_kv = 64;               // s2: key rows per block ("s2"); PASA's M is s2 x s2

  // SageAttention2 (algorithms.md section 4). Smoothing is exact in real arithmetic; the LSE is corrected.
  bool smooth_q = false;           // Q -= mean_tokens(Q), dS = q_m K^T added to S ("smooth_q")
  bool smooth_k = false;           // K -= mean_tokens(K) ("smooth_k")
  bool smooth_v = false;           // V -= mean_tokens(V), added back to O ("smooth_v")
  std::optional<Format> q_quant;   // Q quantizer format, none when empty ("q_quant")
  std::optional<Format> k_quant;   // ("k_quant")
  Granularity q_gran = Granularity::thread;  // ("q_gran")
  Granularity k_gran = Granularity::thread;  // ("k_gran")
  std::optional<Format> v_quant;   // V quantizer, one scale per channel ("v_quant")
  double p_scale = 1.0;            // P is multiplied by this before rounding to `p`: 448 for FP8 ("p_scale")
  bool two_level = true;           // PV of each block in pv_acc, then added into O in `o`; false: one
                                   // pv_acc accumulator across all blocks ("two_level")
  int pv_blocks = 1;               // with two_level: the key blocks pv_acc sums before it is added into O
                                   // (and at the key range's end); more than one take P against the
                                   // running maximum and rescale pv_acc with O ("pv_blocks")
  bool p_running_max = false;      // with two_level: P taken against the running maximum, as the
                                   // SageAttention2 report writes it (P~ = exp(S - m_new)), instead of the
                                   // block's own ("p_max" = block | running)
  RowSum rowsum = RowSum::exponentials;  // ("rowsum" = e | p)

  // FlashDecoding++ (algorithms.md section 5), with shift=unified.
  double phi = 0.0;                // the unified maximum ("phi")
  double window_lo = -9.7;         // FlashDecoding++'s recompute window (not a sliding window): a row
  double window_hi = 10.0;         // with any x - phi outside (lo, hi) is recomputed with the
                                   // synchronized algorithm ("window_lo", "window_hi"; unified only).
                                   // The weights e^(x - phi) in between must be normal and finite in
                                   // the policy's formats: e^-9.7 and e^10 are, in fp16.
  int splits = 1;                  // the key axis cut into this many parts, merged exactly ("splits")

  bool operator==(const Policy& other) const;
  bool operator!=(const Policy& other) const { return !(*this == other); }
};

// The presets: "exact" (FA(FP32), every point fp32), "fa16_fp32" (FA(FP16-FP32): S leaves the GEMM
// in fp16), "fa16" (FA(FP16): fully fp16 but fp32 matrix-engine accumulators), "pasa" (Algorithm 1,
// fp16 throughout but for its running reference, the row's maximum with the pseudo-averages in fp32
// (reference=max), beta 0.984497, s1 = s2 = 128, base-2 scores; reductions accumulate in fp32 as a
// GEMM does), "pasa_accurate" (pasa with S' and every softmax statistic in fp32, pseudo_avg=k and
// natural units: the block's pseudo-average and the running state taken before anything is rounded;
// P and O~ stay fp16), "pasa_fp16acc" (pasa with P V in fp16 accumulators as wgmma sums them, four key
// blocks at a time, P against the running maximum), "sage8" (INT8 Q,K per thread, FP8 e4m3 P and V, smooth K, FP22 PV accumulator
// with two-level accumulation: SageAttention2 on Hopper), "sage_fp8" (sage8 with e4m3 Q,K in the
// same groups and an FP22 Q K^T accumulator: every operand of both GEMMs FP8), "sage4" (INT4 Q,K per warp, smooth Q and
// K), "fdpp" (FlashDecoding++'s unified max phi = 0 with fp16 P).
// Throws pasa::Error for an unknown name.
Policy preset_policy(std::string_view name);

// The scores' units per natural unit: log2(e) for exp_base=2, else 1. The softmax scale is multiplied
// by it wherever it applies; a statistic in these units times 1 / score_unit is in natural units.
double score_unit(const Policy& policy);
std::vector<std::string> preset_names();

// The paper's beta for fp16 and s2 = 128 (Table 3, from the initial value 1 - 2^-6); `pasa beta`
// reproduces it. The `pasa` preset's beta.
inline constexpr double kPaperBeta = 0.984497;

// The fields of the text form, in printing order: the one description of a policy's fields that the
// parser, the printer and the Python package read.
enum class FieldKind {
  format,     // a number format name ("fp16", "e4m3", "e5m10", ...)
  quantizer,  // a number format, or "none"
  choice,     // one of `choices`
  number,     // a real number
  integer,
  boolean,    // "1"/"0" (also "true"/"false" on input)
};
struct PolicyField {
  std::string key;                   // the text key, e.g. "s2"
  FieldKind kind;
  std::vector<std::string> choices;  // the accepted values of a choice field
  std::string doc;                   // one line: what the field sets
};
const std::vector<PolicyField>& policy_fields();
std::string field_kind_name(FieldKind kind);  // "format", "quantizer", "choice", ...

// A field's value as text (its canonical spelling, as to_string prints it); throws pasa::Error for an
// unknown key.
std::string field_value(const Policy& policy, std::string_view key);

// Text form. parse_policy throws pasa::Error naming the offending key or value; the result is
// validated. to_string(parse_policy(t)) is canonical and parses back to the same policy.
Policy parse_policy(std::string_view text);
std::string to_string(const Policy& policy);

// Throws pasa::Error naming the field when the policy cannot run: beta outside [0, 1), block sizes
// not in 1..1024, integer formats where a float is needed, a shift with a scale placement it cannot
// fold, formats wider than the emulator's carrier, and fields set in C++ to values the text form does
// not have (a format check_format refuses, an enum outside its enumerators, a preset name that
// preset_names() does not list).
void validate(const Policy& policy);

}  // namespace pasa
