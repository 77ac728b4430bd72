// SPDX-License-Identifier: Apache-2.0
// policy_family.h: each family's preset with the fields the kernels let vary set back, compared
// field by field; the text form only names the differing fields in errors.
#include "cuda/host/policy_family.h"

#include <optional>
#include <string>
#include <utility>

#include "cuda/host/kernel_params.h"
#include "pasa/error.h"
#include "pasa/format.h"

namespace pasa {
namespace {

std::string field_error(const char* field, const Format& got, const std::string& want) {
  return std::string("policy field '") + field + "': " + got.name() + " is not supported by the CUDA "
         "kernels (they need " + want + ")";
}



// `normalized` is the policy with every field the kernel lets vary set back to `preset`'s value: a
// field that still differs from the preset (smoothing, quantizers, ... whatever the policy type
// grows: operator== covers every field) is one the kernel does not implement. The text form only
// names those fields in the error.
void reject_other_fields(Policy normalized, const char* preset, const char* kernel) {
  if (normalized == preset_policy(preset)) return;
  normalized.preset = preset;
  const std::string text = to_string(normalized);
  throw Error("policy fields '" + text.substr(text.find(',') + 1) + "' are not supported by the CUDA " +
              kernel + " kernel (it implements the " + preset + " preset's other fields as they are)");
}

// The fdpp preset's family: its formats (fp16 input, S and P; fp32 softmax, accumulators and O), any
// phi, window, splits and block sizes, and shift unified (FlashDecoding++) or none (the synchronized
// algorithm in the same formats: "fdpp,shift=none", whose fields are fa16_fp32's but for the block
// sizes, so fa16_fp32 is in the family too). Judged by the fields alone, as Policy's operator== (which
// classify_policy_cached keys on) compares them. Returns false for any other policy; throws naming the
// fields for a unified one that differs elsewhere.
bool is_fdpp_family(const Policy& pol) {
  if (pol.shift != Shift::unified && pol.shift != Shift::none) return false;
  const Policy preset = preset_policy("fdpp");
  Policy normalized = pol;
  normalized.shift = preset.shift;
  normalized.phi = preset.phi;
  normalized.window_lo = preset.window_lo;
  normalized.window_hi = preset.window_hi;
  normalized.splits = preset.splits;
  normalized.block_q = preset.block_q;
  normalized.block_kv = preset.block_kv;
  if (pol.shift == Shift::none && normalized != preset) return false;  // judged as an exact-family policy
  reject_other_fields(normalized, "fdpp", "decode");
  return true;
}

// The presets the sage8 kernel runs: sage8 (INT8 Q and K) and sage_fp8 (e4m3 Q and K).
constexpr const char* kSage8Presets[] = {"sage8", "sage_fp8"};

// `pol` with the fields the sage8 kernel lets vary (s1; s2, checked apart) set back to `name`'s.
Policy sage8_normalized(const Policy& pol, const char* name) {
  const Policy preset = preset_policy(name);
  Policy normalized = pol;
  normalized.block_q = preset.block_q;
  normalized.block_kv = preset.block_kv;
  return normalized;
}

// The sage8 and sage_fp8 presets (SageAttention2's 8-bit kernel, INT8 or e4m3 Q and K): every field
// as a preset has it, any s1 (each row's state is its own); s2 must be the kernel's kSage8BlockKv = 128
// (it sets K's quantization groups and the two-level PV accumulation). Returns false for any other
// policy (judged by the other families).
bool is_sage8(const Policy& pol) {
  bool preset_fields = false;
  for (const char* name : kSage8Presets) preset_fields |= sage8_normalized(pol, name) == preset_policy(name);
  if (!preset_fields) return false;
  if (pol.block_kv != cuda::kSage8BlockKv) {
    throw Error("policy field 's2': " + std::to_string(pol.block_kv) + " is not supported by the CUDA "
                "sage8 kernel (it quantizes K and accumulates P V in key blocks of s2 = " +
                std::to_string(cuda::kSage8BlockKv) + ")");
  }
  return true;
}

// The exact and pasa families of classify_policy; an error naming the field otherwise.
Family classify_exact_or_pasa(const Policy& pol, DType in) {
  const Format in_fmt = in == DType::bf16 ? Format::bf16() : Format::fp16();
  const Format fp32 = Format::fp32();
  const Format fp16 = Format::fp16();
  if (pol.shift == Shift::none) {
    const std::string in_name = in_fmt.name();
    if (pol.input != fp32 && pol.input != in_fmt) {
      throw Error(field_error("input", pol.input, "fp32 or the tensors' dtype " + in_name));
    }
    if (pol.p != fp32 && pol.p != in_fmt) {
      throw Error(field_error("p", pol.p, "fp32 or the tensors' dtype " + in_name +
                                              "; P is rounded to it for the tensor cores"));
    }
    for (auto [field, f] : {std::pair{"qk_acc", pol.qk_acc}, {"s", pol.s}, {"softmax", pol.softmax},
                           {"pv_acc", pol.pv_acc}, {"o", pol.o}}) {
      if (f != fp32) throw Error(field_error(field, f, "fp32 without shift, i.e. the exact policy"));
    }
    if (pol.scale != ScalePlacement::scores) {
      throw Error("policy field 'scale': only s (scores) is supported by the CUDA exact kernel");
    }
    // s1 / s2 / splits only order fp32 roundings here: the kernels use their own tiles (the decode
    // path takes a policy's splits > 1 as its split count).
    const Policy preset = preset_policy("exact");
    Policy normalized = pol;
    normalized.input = normalized.p = fp32;
    normalized.block_q = preset.block_q;
    normalized.block_kv = preset.block_kv;
    normalized.splits = preset.splits;
    reject_other_fields(normalized, "exact", "exact");
    return Family::exact;
  }
  if (pol.shift != Shift::pasa) {
    throw Error("policy field 'shift': only none (exact), pasa and unified (fdpp) are supported by the "
                "CUDA kernels");
  }
  // shift == pasa: the pasa preset's formats, pasa_accurate's (S' and the softmax state in fp32), or
  // pasa_fp16acc's (P V accumulated in fp16; with pasa's fp16 state).
  const Format state = pol.s == fp32 && pol.softmax == fp32 ? fp32 : fp16;
  const Format pv_acc = state == fp16 && pol.pv_acc == fp16 ? fp16 : fp32;
  const std::pair<const char*, Format> want[] = {{"input", fp16}, {"qk_acc", fp32}, {"s", state},
                                                 {"softmax", state}, {"p", fp16}, {"pv_acc", pv_acc},
                                                 {"o", fp16}};
  const Format got[] = {pol.input, pol.qk_acc, pol.s, pol.softmax, pol.p, pol.pv_acc, pol.o};
  for (int i = 0; i < 7; ++i) {
    if (got[i] != want[i].second) {
      throw Error(field_error(want[i].first, got[i], want[i].second.name() + " with shift=pasa (the pasa, "
                                                                             "pasa_accurate or pasa_fp16acc preset)"));
    }
  }
  if (pol.scale != ScalePlacement::key) {
    throw Error("policy field 'scale': shift=pasa needs scale=k (alpha folded into M) on the CUDA kernels");
  }
  if (pol.block_kv != cuda::kPasaBlockKv) {
    throw Error("policy field 's2': " + std::to_string(pol.block_kv) + " is not supported by the CUDA "
                "pasa kernel (it shifts key blocks of s2 = " + std::to_string(cuda::kPasaBlockKv) + ")");
  }
  if (pv_acc == fp16 && pol.pv_blocks != cuda::kPasaPvBlocks) {
    throw Error("policy field 'pv_blocks': " + std::to_string(pol.pv_blocks) + " is not supported by the CUDA "
                "pasa kernel (its fp16 accumulator sums pv_blocks = " + std::to_string(cuda::kPasaPvBlocks) +
                " key blocks)");
  }
  if (pol.pseudo_avg == PseudoAverage::scores && state == fp16) {
    throw Error("policy field 'pseudo_avg': s (the mean of S' after its rounding to fp16) is not supported by "
                "the CUDA pasa kernel (it takes the mean before that rounding, pseudo_avg=acc, the pasa preset's, "
                "or from the mean key, pseudo_avg=k)");
  }
  if (pol.reference != PasaReference::maximum) {
    throw Error("policy field 'reference': average (Algorithm 1's reference, G times the global "
                "pseudo-average, in the softmax format) is not supported by the CUDA pasa kernels (they keep "
                "the state relative to the running maximum, reference=max; the CPU emulator runs both)");
  }
  // Any beta, pseudo_avg k or acc (or s where S' is fp32: the same mean); s1 does not change the
  // result (each row's state is its own).
  const char* name = state == fp32 ? "pasa_accurate" : pv_acc == fp16 ? "pasa_fp16acc" : "pasa";
  const Policy preset = preset_policy(name);
  Policy normalized = pol;
  normalized.preset = name;
  normalized.beta = preset.beta;
  normalized.pseudo_avg = preset.pseudo_avg;  // both kinds of pseudo-average are implemented
  normalized.block_q = preset.block_q;
  reject_other_fields(normalized, name, "pasa");
  return Family::pasa;
}

// The kernels implement four policy families: exact (fp32 scores and softmax; P rounded to the input
// dtype for the tensor cores; input and p may name that dtype or fp32; any s1, s2, splits), the pasa,
// pasa_accurate and pasa_fp16acc presets (any beta and s1; s2 = 128), the sage8 and sage_fp8 presets
// (is_sage8) and the fdpp preset (is_fdpp_family; decode shapes only).
// Everything else is an error naming the field.
Family classify_policy(const Policy& pol, DType in) {
  if (is_fdpp_family(pol)) return Family::fdpp;
  if (is_sage8(pol)) return Family::sage8;
  try {
    return classify_exact_or_pasa(pol, in);
  } catch (const Error&) {
    // A policy derived from sage8 or sage_fp8 that no kernel runs (sage8,rowsum=e; sage8,two_level=0):
    // the fields that differ from its preset say more than the exact family's refusal of p = e4m3.
    for (const char* name : kSage8Presets) {
      if (pol.preset == name) reject_other_fields(sage8_normalized(pol, name), name, "sage8");
    }
    throw;
  }
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::exact: return "exact";
    case Family::pasa: return "pasa";
    case Family::fdpp: return "fdpp";
    case Family::sage8: return "sage8";
  }
  return "?";
}

Family classify_policy_cached(const Policy& pol, DType in) {
  struct Entry {
    Policy policy;
    DType in;
    Family family;
  };
  thread_local std::optional<Entry> last;
  if (!last || last->in != in || last->policy != pol) last = Entry{pol, in, classify_policy(pol, in)};
  return last->family;
}

}  // namespace pasa
