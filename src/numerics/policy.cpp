// SPDX-License-Identifier: Apache-2.0
// Policies: presets, text form and validation.
#include "pasa/policy.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <locale.h>  // newlocale, strtod_l (POSIX / glibc)
#include <stdlib.h>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "numerics/pasa_headroom.h"
#include "pasa/error.h"
#include "text/format.h"

namespace pasa {
namespace {

// The ranges validate() holds the integer fields to (s1 and s2: block sizes; splits).
constexpr int kMaxBlock = 1024;
constexpr int kMaxSplits = 1024;

std::string shift_name(Shift s) {
  switch (s) {
    case Shift::none: return "none";
    case Shift::pasa: return "pasa";
    case Shift::unified: return "unified";
  }
  return "?";
}

// One row per text key: its public description, how to print it and how to set it. The order here
// is the printing order.
struct Field {
  PolicyField info;
  std::function<std::string(const Policy&)> get;
  std::function<void(Policy&, const std::string&)> set;
};

Format parse_field_format(const char* key, const std::string& value) {
  try {
    return parse_format(value);
  } catch (const Error& e) {
    throw Error(std::string("policy field '") + key + "': " + e.what());
  }
}

// The number `value` spells, as strtod reads it (the syntax std::stod took, without its exceptions:
// stod called a subnormal, a valid value, out of range). A magnitude below the smallest subnormal rounds
// to 0 as strtod rounds it; one past a double's is out of range, named with `range` (an integer field's
// own range: "must be in 1..1024").
// A field's number, in the "C" locale's syntax whatever the process's LC_NUMERIC (to_string prints
// it so: a program that set a locale with a decimal comma reads back what it wrote).
double parse_number(const char* key, const std::string& value,
                    const std::string& range = "a double's largest magnitude is 1.79769e+308") {
  static const locale_t c_numbers = newlocale(LC_NUMERIC_MASK, "C", static_cast<locale_t>(nullptr));
  errno = 0;
  char* end = nullptr;
  const double x = strtod_l(value.c_str(), &end, c_numbers);
  if (value.empty() || end != value.c_str() + value.size()) {
    throw Error(std::string("policy field '") + key + "': '" + value + "' is not a number");
  }
  if (errno == ERANGE && std::isinf(x)) {
    throw Error(text::format("policy field '{}': {} is out of range ({})", key, value, range));
  }
  return x;
}

// An integer field's value. One past what an int holds is named with the field's range [lo, hi] here,
// as it cannot reach validate(), which names the range for the others.
int parse_int(const char* key, const std::string& value, int lo, int hi) {
  const std::string range = text::format("must be in {}..{}", lo, hi);
  const double x = parse_number(key, value, range);
  if (x != std::floor(x)) {  // (NaN included)
    throw Error(std::string("policy field '") + key + "': '" + value + "' is not an integer");
  }
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
    throw Error(text::format("policy field '{}': {} is out of range ({})", key, value, range));
  }
  return static_cast<int>(x);
}

bool parse_bool(const char* key, const std::string& value) {
  if (value == "1" || value == "true") return true;
  if (value == "0" || value == "false") return false;
  throw Error(std::string("policy field '") + key + "': '" + value + "' is not 1/0 or true/false");
}

Field bool_field(const char* key, bool Policy::*member, const char* doc) {
  return Field{{key, FieldKind::boolean, {}, doc},
               [member](const Policy& p) { return std::string(p.*member ? "1" : "0"); },
               [key, member](Policy& p, const std::string& v) { p.*member = parse_bool(key, v); }};
}

Field number_field(const char* key, double Policy::*member, const char* doc) {
  return Field{{key, FieldKind::number, {}, doc},
               // (-0 printed as 0: it equals 0, and equal policies print one text)
               [member](const Policy& p) { return text::format("{}", p.*member == 0.0 ? 0.0 : p.*member); },
               [key, member](Policy& p, const std::string& v) { p.*member = parse_number(key, v); }};
}

Field int_field(const char* key, int Policy::*member, int lo, int hi, const char* doc) {
  return Field{{key, FieldKind::integer, {}, doc},
               [member](const Policy& p) { return std::to_string(p.*member); },
               [key, member, lo, hi](Policy& p, const std::string& v) {
                 p.*member = parse_int(key, v, lo, hi);
               }};
}

// A quantizer format, or "none".
Field quantizer_field(const char* key, std::optional<Format> Policy::*member, const char* doc) {
  return Field{{key, FieldKind::quantizer, {}, doc},
               [member](const Policy& p) { return p.*member ? (p.*member)->name() : std::string("none"); },
               [key, member](Policy& p, const std::string& v) {
                 if (v == "none") p.*member = std::nullopt;
                 else p.*member = parse_field_format(key, v);
               }};
}

Field granularity_field(const char* key, Granularity Policy::*member, const char* doc) {
  std::vector<std::string> names;
  for (Granularity g : {Granularity::tensor, Granularity::block, Granularity::warp, Granularity::thread,
                        Granularity::token}) {
    names.push_back(granularity_name(g));
  }
  return Field{{key, FieldKind::choice, names, doc},
               [member](const Policy& p) { return granularity_name(p.*member); },
               [key, member](Policy& p, const std::string& v) {
                 try {
                   p.*member = parse_granularity(v);
                 } catch (const Error& e) {
                   throw Error(std::string("policy field '") + key + "': " + e.what());
                 }
               }};
}

Field format_field(const char* key, Format Policy::*member, const char* doc) {
  return Field{{key, FieldKind::format, {}, doc},
               [member](const Policy& p) { return (p.*member).name(); },
               [key, member](Policy& p, const std::string& v) { p.*member = parse_field_format(key, v); }};
}

// A field holding an enum: its text names in enum order (index = enum value).
template <typename Enum>
Field choice_field(const char* key, Enum Policy::*member, std::vector<std::string> names, const char* doc) {
  return Field{{key, FieldKind::choice, names, doc},
               [member, names](const Policy& p) {
                 // "?" for a value outside the enumerators (set in C++), which validate() refuses.
                 const auto i = static_cast<std::size_t>(p.*member);
                 return i < names.size() ? names[i] : std::string("?");
               },
               [key, member, names](Policy& p, const std::string& v) {
                 for (std::size_t i = 0; i < names.size(); ++i) {
                   if (v == names[i]) {
                     p.*member = static_cast<Enum>(i);
                     return;
                   }
                 }
                 std::string known;
                 for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
                 throw Error(std::string("policy field '") + key + "': '" + v + "' is not one of " + known);
               }};
}


// Every field of Policy but the preset name, with its text key. A new field goes into
// Policy::operator== too (and into the overrides of Policy.EqualityCoversEveryTextField).
const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      format_field("input", &Policy::input, "Q, K, V are converted to this format on entry"),
      format_field("qk_acc", &Policy::qk_acc, "accumulator inside the Q K^T GEMM"),
      format_field("s", &Policy::s, "S as it leaves the Q K^T GEMM"),
      choice_field("scale", &Policy::scale, {"s", "q", "k"},
                   "where the softmax scale multiplies in: s (the scores), q (Q before the GEMM), k (K, "
                   "or PASA's shifting matrix M)"),
      format_field("softmax", &Policy::softmax, "scaled S, max, exp, rowsum and shift terms (PASA's m and shift terms only with "
                   "reference=average: with max they are fp32)"),
      choice_field("exp_base", &Policy::exp_base, {"e", "2"},
                   "the softmax's units and exponential: e (natural units, e^x) or 2 (scores times "
                   "log2(e), 2^x, as a GPU's exponential unit computes it)"),
      format_field("sum_acc", &Policy::sum_acc,
                   "accumulator of the softmax's row sums (of the exponentials with rowsum=e, and PASA's sum "
                   "of a block's S')"),
      format_field("p", &Policy::p, "P as the P V GEMM's operand"),
      format_field("pv_acc", &Policy::pv_acc, "accumulator inside the P V GEMM"),
      format_field("o", &Policy::o, "P V output, the running O~ and the final O~ / l"),
      int_field("mma_k", &Policy::mma_k, 0, kMaxBlock,
                "an accumulator narrower than fp32 (qk_acc, pv_acc) rounds after every product (0) or "
                "once per step of this many products, summed as Hopper's tensor cores do (16: wgmma)"),
      choice_field("shift", &Policy::shift, {"none", "pasa", "unified"},
                   "what the scores are measured against: none (running max), pasa (pseudo-average, "
                   "beta), unified (FlashDecoding++'s fixed phi)"),
      number_field("beta", &Policy::beta, "PASA's beta in [0, 1) (shift=pasa)"),
      choice_field("pseudo_avg", &Policy::pseudo_avg, {"s", "k", "acc"},
                   "PASA's local pseudo-average: s (the mean of S' as rounded), k (Q times M's row "
                   "sum times the block's mean key) or acc (the mean of S' as accumulated, before its "
                   "rounding)"),
      choice_field("reference", &Policy::reference, {"max", "average"},
                   "what PASA's state is relative to: max (the row's running maximum of the recovered "
                   "scores, with the pseudo-averages, in fp32) or average (Algorithm 1's G times the "
                   "global pseudo-average, in the softmax format)"),
      int_field("s1", &Policy::block_q, 1, kMaxBlock, "query rows per block"),
      int_field("s2", &Policy::block_kv, 1, kMaxBlock, "key rows per block (PASA's M is s2 x s2)"),
      bool_field("smooth_q", &Policy::smooth_q, "Q -= its token mean, the correction dS added to S"),
      bool_field("smooth_k", &Policy::smooth_k, "K -= its token mean"),
      bool_field("smooth_v", &Policy::smooth_v, "V -= its token mean, added back to O"),
      quantizer_field("q_quant", &Policy::q_quant, "Q's quantizer format, or none"),
      quantizer_field("k_quant", &Policy::k_quant, "K's quantizer format, or none"),
      granularity_field("q_gran", &Policy::q_gran, "Q's quantization granularity"),
      granularity_field("k_gran", &Policy::k_gran, "K's quantization granularity"),
      quantizer_field("v_quant", &Policy::v_quant, "V's quantizer (one scale per channel), or none"),
      number_field("p_scale", &Policy::p_scale, "P is multiplied by this before rounding to p (448 for FP8)"),
      bool_field("two_level", &Policy::two_level,
                 "1: each block's P V in pv_acc, added into O in o; 0: one pv_acc accumulator"),
      int_field("pv_blocks", &Policy::pv_blocks, 1, kMaxBlock,
                "with two_level=1, the key blocks pv_acc sums before it is added into O (more than one "
                "need p_max=running)"),
      choice_field("p_max", &Policy::p_running_max, {"block", "running"},
                   "the maximum P's exponentials are taken against: the block's (block) or the running "
                   "one (running)"),
      choice_field("rowsum", &Policy::rowsum, {"e", "p"},
                   "what a block's row sum adds: e (the exponentials, in sum_acc) or p (P as rounded "
                   "to p, in pv_acc: a column of ones in the P V GEMM)"),
      number_field("phi", &Policy::phi, "FlashDecoding++'s unified maximum (shift=unified)"),
      number_field("window_lo", &Policy::window_lo,
                   "FlashDecoding++'s recompute window (not a sliding window): rows with x - phi <= "
                   "window_lo are recomputed (shift=unified)"),
      number_field("window_hi", &Policy::window_hi,
                   "FlashDecoding++'s recompute window: rows with x - phi >= window_hi are recomputed "
                   "(shift=unified)"),
      int_field("splits", &Policy::splits, 1, kMaxSplits, "the key axis cut into this many parts, merged exactly"),
  };
  return table;
}

const Field& find_field(std::string_view key) {
  for (const Field& f : fields()) {
    if (key == f.info.key) return f;
  }
  std::string keys;
  for (const Field& f : fields()) keys += (keys.empty() ? "" : ", ") + f.info.key;
  throw Error("policy: unknown key '" + std::string(key) + "' (keys: " + keys + ")");
}

std::string trim(std::string_view s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

bool fits_in_fp32(const Format& f) {
  return f.is_integer() || (f.exp_bits <= 8 && f.man_bits <= 23);
}

}  // namespace

const std::vector<PolicyField>& policy_fields() {
  static const std::vector<PolicyField> table = [] {
    std::vector<PolicyField> out;
    for (const Field& f : fields()) out.push_back(f.info);
    return out;
  }();
  return table;
}

std::string field_kind_name(FieldKind kind) {
  switch (kind) {
    case FieldKind::format: return "format";
    case FieldKind::quantizer: return "quantizer";
    case FieldKind::choice: return "choice";
    case FieldKind::number: return "number";
    case FieldKind::integer: return "integer";
    case FieldKind::boolean: return "boolean";
  }
  return "?";
}

std::string field_value(const Policy& policy, std::string_view key) { return find_field(key).get(policy); }


// Member by member, not through the text form: the CUDA dispatch compares policies on every call.
// Every field of fields() (the preset name is not one); Policy.EqualityCoversEveryTextField checks.
bool Policy::operator==(const Policy& other) const {
  return input == other.input && qk_acc == other.qk_acc && s == other.s && scale == other.scale &&
         softmax == other.softmax && exp_base == other.exp_base && sum_acc == other.sum_acc && p == other.p &&
         pv_acc == other.pv_acc && o == other.o && mma_k == other.mma_k && shift == other.shift &&
         beta == other.beta && pseudo_avg == other.pseudo_avg && reference == other.reference && block_q == other.block_q &&
         block_kv == other.block_kv && smooth_q == other.smooth_q && smooth_k == other.smooth_k &&
         smooth_v == other.smooth_v && q_quant == other.q_quant && k_quant == other.k_quant &&
         q_gran == other.q_gran && k_gran == other.k_gran && v_quant == other.v_quant && p_scale == other.p_scale &&
         two_level == other.two_level && pv_blocks == other.pv_blocks && p_running_max == other.p_running_max &&
         rowsum == other.rowsum && phi == other.phi && window_lo == other.window_lo &&
         window_hi == other.window_hi && splits == other.splits;
}

std::vector<std::string> preset_names() {
  return {"exact", "fa16_fp32", "fa16", "pasa", "pasa_accurate", "pasa_fp16acc", "sage8", "sage_fp8", "sage4",
          "fdpp"};
}

namespace {

// An error's advice "p_scale <= X": the largest X at or below `bound` that passes `fits` (true for the
// smaller values), in at most six significant digits rounded down (a bound printed rounded up, or
// one whose rounding to p lands above it, would be refused in turn).
double advised_scale(double bound, const std::function<bool(double)>& fits) {
  double lo = 0.0, hi = bound;
  for (int i = 0; i < 200 && lo < hi; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (mid == lo || mid == hi) break;
    (fits(mid) ? lo : hi) = mid;
  }
  if (fits(hi)) lo = hi;
  if (lo <= 0.0) return lo;
  const double unit = std::pow(10.0, std::floor(std::log10(lo)) - 5);  // the sixth significant digit
  const double shortened = std::floor(lo / unit) * unit;
  return fits(shortened) ? shortened : lo;
}

// "(presets: exact, fa16_fp32, ...)" for the errors that name an unknown preset.
std::string known_presets() {
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return "(presets: " + known + ")";
}

// FlashDecoding++'s window is what makes a unified maximum safe: a row is recomputed with the
// synchronized algorithm when any x - phi leaves (window_lo, window_hi), so every weight
// P = base^(x - phi) of a row that is not lies strictly between base^window_lo and base^window_hi.
// Those weights need the two guarantees that P <= 1 gets from the running maximum (validate()'s
// p_scale checks): the largest finite in softmax (where P is taken) and in p (times p_scale), and
// the smallest normal value of softmax, and of p, pv_acc and o times p_scale. Without the second, a
// row whose every score sits just above window_lo gets weights that underflow (O = 0, or NaN where l
// sums P as rounded) while the reference is finite. The sums of the weights need fp32's exponent
// range as well (below); the emulator recomputes a row whose sums overflow even that.
void check_unified_window(const Policy& p) {
  const char* base = p.exp_base == ExpBase::two ? "2" : "e";
  const double ln_base = p.exp_base == ExpBase::two ? std::log(2.0) : 1.0;
  auto exponent_of = [&](double v) { return std::log(v) / ln_base; };  // base^result = v
  // The binding formats (for the message): softmax, unless p (scaled) is tighter.
  const double hi_softmax = exponent_of(p.softmax.max_finite()), hi_p = exponent_of(p.p.max_finite() / p.p_scale);
  const double hi_max = std::min(hi_softmax, hi_p);
  double lo_min = exponent_of(p.softmax.min_normal());
  const char* lo_key = "softmax";
  Format lo_format = p.softmax;
  for (auto [key, f] : {std::pair{"p", p.p}, {"pv_acc", p.pv_acc}, {"o", p.o}}) {
    const double smallest = exponent_of((f.is_integer() ? 1.0 : f.min_normal()) / p.p_scale);
    if (smallest > lo_min) {
      lo_min = smallest;
      lo_key = key;
      lo_format = f;
    }
  }
  // The unified max scales the weights by up to base^window from the synchronized algorithm's (at most
  // 1), so the statistics and the P V sums that carry them need fp32's exponent range: in a 16-bit one
  // a few weights near the top overflow l or O~, and near the bottom O~ of small values underflows.
  for (auto [key, f] : {std::pair{"softmax", p.softmax}, {"sum_acc", p.sum_acc}, {"pv_acc", p.pv_acc}, {"o", p.o}}) {
    if (!f.is_integer() && f.max_finite() < std::ldexp(1.0, 127)) {
      throw Error(text::format("policy field '{}': {} has too narrow a range for shift=unified (the unified "
                               "maximum moves the weights by up to {}^{} and {}^{}; use a format with fp32's "
                               "exponent range: fp32, bf16, fp22)", key, f.name(), base, p.window_hi, base,
                               p.window_lo));
    }
  }
  if (p.window_lo >= lo_min && p.window_hi <= hi_max) return;
  // (The limits printed rounded inward, so that the printed values pass.)
  const auto inward = [](double v, bool up) {
    if (v == 0.0 || !std::isfinite(v)) return v;
    const double scale = std::pow(10.0, 5 - std::floor(std::log10(std::fabs(v))));
    return (up ? std::ceil(v * scale) : std::floor(v * scale)) / scale;
  };
  throw Error(text::format(
      "policy field 'window_lo'/'window_hi': ({}, {}) is not a safe recompute window for these formats: "
      "the weights {}^(x - phi) of a row that is not recomputed must stay finite in {} ({}) and {} in {} "
      "({}), so window_lo >= {:.6g} and window_hi <= {:.6g}",
      p.window_lo, p.window_hi, base, hi_p < hi_softmax ? p.p.name() : p.softmax.name(), hi_p < hi_softmax ? "p" : "softmax",
      lo_format.is_integer() ? "nonzero" : "normal", lo_format.name(), lo_key, inward(lo_min, true),
      inward(hi_max, false)));
}

}  // namespace

Policy preset_policy(std::string_view name) {
  Policy p;  // "exact": fp32 at every rounding point
  p.preset = std::string(name);
  if (name == "exact") return p;
  if (name == "sage8" || name == "sage_fp8" || name == "sage4") {
    // SageAttention2: inputs as given (fp16/bf16 are exact in fp32), quantized on the way into the
    // GEMMs; S, softmax and O in fp32; FP8 P with the static factor 448 and per-channel FP8 V; the FP8
    // MMA's accumulator modelled as FP22 (e8m13), added block by block into fp32 O.
    p.q_quant = Format::int8();
    p.k_quant = Format::int8();
    p.smooth_k = true;
    p.p = Format::e4m3();
    p.p_scale = 448.0;
    p.v_quant = Format::e4m3();
    p.pv_acc = Format::fp22();
    p.block_q = 128;
    // Key blocks of 128 as SageAttention2's Hopper kernel uses (CTA_K = 128), so the CUDA kernel's
    // softmax, K scales and two-level accumulation work on whole 128-key tiles; sage4 keeps 64.
    p.block_kv = name == "sage4" ? 64 : 128;
    // sage8's row sums are those of P~ as rounded, which the CUDA kernel takes from the P~ V GEMM (a
    // column of ones) instead of summing the exponentials on the CUDA cores: O~ and l then weigh every
    // key alike (docs/numerics.md measures it against rowsum=e).
    if (name != "sage4") p.rowsum = RowSum::p;
    if (name == "sage_fp8") {
      // sage8 with e4m3 Q and K (same groups, scale max / 448): the Q K^T GEMM is an FP8 one, whose
      // accumulator is modelled as FP22 like P V's, and the scores leave it as floats.
      p.q_quant = Format::e4m3();
      p.k_quant = Format::e4m3();
      p.qk_acc = Format::fp22();
    }
    if (name == "sage4") {
      p.q_quant = Format::int4();
      p.k_quant = Format::int4();
      p.q_gran = Granularity::warp;
      p.k_gran = Granularity::warp;
      p.smooth_q = true;
    }
    return p;
  }
  // The paper's low-precision allocations (algorithms.md section 2). Matrix engines accumulate in fp32 inside
  // a GEMM (Ascend Cube, NVIDIA HMMA .f32); what changes is the format of what leaves the GEMM.
  p.input = Format::fp16();
  p.s = Format::fp16();
  p.p = Format::fp16();
  p.block_q = 128;
  p.block_kv = 128;
  if (name == "fa16_fp32") return p;
  p.softmax = Format::fp16();
  p.o = Format::fp16();
  if (name == "fa16") return p;
  if (name == "pasa" || name == "pasa_accurate" || name == "pasa_fp16acc") {
    p.shift = Shift::pasa;
    p.beta = kPaperBeta;
    p.scale = ScalePlacement::key;
    // l sums P as rounded to fp16, as the kernels take it (P times a tile of ones in the P V GEMM's
    // fp32 accumulators): for pasa, whose exponentials are fp16 already, the same sums.
    p.rowsum = RowSum::p;
    if (name == "pasa_accurate") {
      // Only the statistics change: S' stays in the GEMM's fp32 accumulator, and the local
      // pseudo-average (multiplied by G ~ 64 in the state update) comes from the mean key, so it
      // carries neither fp16's rounding nor that of K'; P, V, the P V output and O~ are still fp16.
      p.s = Format::fp32();
      p.softmax = Format::fp32();
      p.pseudo_avg = PseudoAverage::keys;
    } else {
      // The block's pseudo-average from the GEMM's accumulators, before S' is rounded to fp16: what
      // the kernels compute (a GEMM column of the mean of the stored K' rows). Algorithm 1's mean of
      // the rounded S' is pseudo_avg=s; where S' is large (fp16's ulp 1 above 1024) its rounding,
      // multiplied by G ~ 64, makes the block offsets wrong by several units.
      p.pseudo_avg = PseudoAverage::accumulator;
      // Base-2 scores: a GPU takes each fp16 exponential as 2^x of S' - m without a multiply by
      // log2 e. The rounding points are the same; on the study's inputs the errors are 1.07-1.08x
      // natural units' (geometric means, docs/algorithms.md). pasa_accurate keeps natural units: at d = 128
      // its error is dominated by how M's entries round, and they round nearer alpha than alpha log2 e
      // (a relative scale error of 1e-5 against 4e-4; docs/algorithms.md).
      p.exp_base = ExpBase::two;
    }
    if (name == "pasa_fp16acc") {
      // The paper's fp16 P V accumulation (algorithms.md section 2) as Hopper's tensor cores run it: P V
      // summed in their fp16 accumulators (wgmma's steps of 16 products) across four key blocks, P taken
      // against the running maximum so that the blocks share one reference, then added into the fp16 O.
      // No fp32 P V and no O~ update on the CUDA cores for three blocks in four. Four, not the whole row:
      // one accumulator across a long diffuse row stagnates (70000 keys of weight 0.015 gave O = 0.47
      // for 1), where 512 keys keep a step's sum near 32 ulp of the accumulator (docs/numerics.md).
      p.pv_acc = Format::fp16();
      p.mma_k = 16;
      p.pv_blocks = 4;
      p.p_running_max = true;
    }
    return p;
  }
  if (name == "fdpp") {
    // FlashDecoding++: fp16 operands, fp32 statistics, one unified max for every split of the keys.
    // No split count: with the unified max the splits' partials add up without rescaling, so their
    // number changes only the order of fp32 sums, and the GPU chooses it to fill its SMs.
    p.softmax = Format::fp32();
    p.o = Format::fp32();
    p.shift = Shift::unified;
    p.block_q = 16;
    p.block_kv = 128;
    return p;
  }
  throw Error("unknown policy '" + std::string(name) + "' " + known_presets());
}

double score_unit(const Policy& policy) {
  return policy.exp_base == ExpBase::two ? 1.4426950408889634 : 1.0;  // log2(e)
}

Policy parse_policy(std::string_view text) {
  // A control character other than white space (a NUL from a C string boundary) would cut or garble
  // the messages below, which quote the text: refused by position first.
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && !std::isspace(c)) || c == 0x7f) {
      throw Error(text::format("policy text: control character 0x{:02x} at byte {} (a policy is printable "
                               "text such as 'pasa,s2=64')", static_cast<unsigned>(c), i));
    }
  }
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::size_t end = comma == std::string_view::npos ? text.size() : comma;
    parts.push_back(trim(text.substr(start, end - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (parts.size() == 1 && parts[0].empty()) throw Error("policy text is empty (try 'exact' or 'pasa')");
  if (parts[0].empty()) {
    throw Error("policy '" + std::string(text) + "': no preset before the first comma (a policy is a preset, "
                "then key=value overrides: 'pasa,s2=64')");
  }
  Policy p = preset_policy(parts[0]);
  std::vector<std::string> seen;  // a key given twice is a mistake, not an override
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& kv = parts[i];
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      throw Error("policy '" + std::string(text) + "': '" + kv + "' is not key=value");
    }
    const std::string key = trim(kv.substr(0, eq));
    const std::string value = trim(kv.substr(eq + 1));
    const Field* field = nullptr;
    for (const Field& f : fields()) {
      if (key == f.info.key) field = &f;
    }
    if (field == nullptr) {
      std::string keys;
      for (const Field& f : fields()) keys += (keys.empty() ? "" : ", ") + f.info.key;
      throw Error("policy '" + std::string(text) + "': unknown key '" + key + "' (keys: " + keys + ")");
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw Error("policy '" + std::string(text) + "': key '" + key + "' is given twice");
    }
    seen.push_back(key);
    field->set(p, value);
  }
  validate(p);
  return p;
}

std::string to_string(const Policy& policy) {
  const Policy base = preset_policy(policy.preset);
  std::string out = policy.preset;
  for (const Field& f : fields()) {
    const std::string value = f.get(policy);
    if (value != f.get(base)) out += "," + f.info.key + "=" + value;
  }
  return out;
}

void validate(const Policy& p) {
  // Fields set in C++ rather than parsed: the preset (what the policy prints from), and every format
  // and choice, must be one the text form has.
  static const std::vector<std::string> presets = preset_names();  // (validate runs on every call)
  if (std::find(presets.begin(), presets.end(), p.preset) == presets.end()) {
    throw Error("policy field 'preset': '" + p.preset + "' is not a preset " + known_presets());
  }
  for (auto [key, f] : {std::pair{"input", &p.input}, {"qk_acc", &p.qk_acc}, {"s", &p.s}, {"softmax", &p.softmax},
                        {"sum_acc", &p.sum_acc}, {"p", &p.p}, {"pv_acc", &p.pv_acc}, {"o", &p.o}}) {
    check_format(*f, std::string("policy field '") + key + "'");
  }
  for (auto [key, f] : {std::pair{"q_quant", &p.q_quant}, {"k_quant", &p.k_quant}, {"v_quant", &p.v_quant}}) {
    if (*f) check_format(**f, std::string("policy field '") + key + "'");
  }
  for (const Field& field : fields()) {
    if (field.info.kind != FieldKind::choice) continue;
    const std::string value = field.get(p);
    if (std::find(field.info.choices.begin(), field.info.choices.end(), value) == field.info.choices.end()) {
      throw Error("policy field '" + field.info.key + "': not one of its choices (an enumerator out of range)");
    }
  }
  auto require_float = [](const char* key, const Format& f) {
    if (f.is_integer()) {
      throw Error(std::string("policy field '") + key + "': " + f.name() +
                  " is an integer format; this rounding point needs a floating-point format");
    }
  };
  require_float("input", p.input);
  require_float("qk_acc", p.qk_acc);
  require_float("s", p.s);
  require_float("softmax", p.softmax);
  require_float("sum_acc", p.sum_acc);
  // p may be an integer grid: with p_scale it is then a quantizer of P (the report's INT8 P).
  require_float("pv_acc", p.pv_acc);
  require_float("o", p.o);
  // GEMM operands are carried as fp32 by the emulator (and by every matrix engine).
  for (auto [key, f] : {std::pair{"input", p.input}, {"s", p.s}, {"p", p.p}, {"q_quant", p.q_quant.value_or(p.input)},
                        {"k_quant", p.k_quant.value_or(p.input)}, {"v_quant", p.v_quant.value_or(p.input)}}) {
    if (!fits_in_fp32(f)) {
      throw Error(std::string("policy field '") + key + "': " + f.name() +
                  " is wider than fp32, the widest GEMM operand the emulator models");
    }
  }
  // Masked scores and the initial running max are -inf: the softmax format must hold infinity.
  if (p.softmax.fn || p.softmax.overflow != Overflow::to_inf) {
    throw Error("policy field 'softmax': " + p.softmax.name() +
                " has no infinity, which masking and the running max need");
  }
  if (!(p.beta >= 0.0 && p.beta < 1.0)) {
    throw Error(text::format("policy field 'beta': {} is outside [0, 1){}", p.beta,
                             p.beta == 1.0 ? " (beta = 1 makes the shifting matrix singular)" : ""));
  }
  if (p.shift != Shift::pasa && p.beta != 0.0) {
    throw Error("policy field 'beta': set to " + text::format("{}", p.beta) + " but shift=" +
                shift_name(p.shift) + " ignores it (use shift=pasa)");
  }
  if (p.shift != Shift::pasa && p.pseudo_avg != PseudoAverage::scores) {
    throw Error("policy field 'pseudo_avg': set but shift=" + shift_name(p.shift) +
                " has no pseudo-average (use shift=pasa)");
  }
  if (p.shift != Shift::pasa && p.reference != PasaReference::maximum) {
    throw Error("policy field 'reference': set but shift=" + shift_name(p.shift) +
                " keeps its running maximum as it is (use shift=pasa)");
  }
  // Fields that only a quantizer, two-level accumulation or a softmax row sum reads are refused where
  // nothing reads them and they were set (their value is neither the default nor the preset's, so the
  // text names them), as beta and phi are: the text would claim a policy that runs as another. (The
  // preset is built only then: validate runs on every call.)
  const auto set = [&](auto field) {
    return p.*field != Policy{}.*field && p.*field != preset_policy(p.preset).*field;
  };
  for (auto [key, quantizer, quant, gran, field] :
       {std::tuple{"q_gran", "q_quant", &p.q_quant, p.q_gran, &Policy::q_gran},
        {"k_gran", "k_quant", &p.k_quant, p.k_gran, &Policy::k_gran}}) {
    if (!*quant && set(field)) {
      throw Error(text::format("policy field '{}': set to {} but {}=none ignores it (a granularity is the "
                               "groups of a quantizer's scales)", key, granularity_name(gran), quantizer));
    }
  }
  if (p.pv_blocks > 1 && !p.two_level) {
    throw Error(text::format("policy field 'pv_blocks': {} but two_level=0 ignores it (one accumulator already "
                             "sums every block); set pv_blocks=1", p.pv_blocks));
  }
  if (p.pv_blocks > 1 && !p.p_running_max) {
    throw Error(text::format("policy field 'pv_blocks': {} blocks in one pv_acc need P against the running "
                             "maximum, which they share; set p_max=running, or pv_blocks=1 for P against each "
                             "block's own", p.pv_blocks));
  }
  // (p_max's value differing from its preset's is named by the text whichever it is: block is the
  // default, but not pasa_fp16acc's.)
  if (!p.two_level && p.p_running_max != preset_policy(p.preset).p_running_max) {
    throw Error(std::string("policy field 'p_max': set to ") + (p.p_running_max ? "running" : "block") +
                " but two_level=0 ignores it (one accumulator takes P against the running maximum)");
  }
  const bool sum_acc_read = p.rowsum == RowSum::exponentials ||
                            (p.shift == Shift::pasa && p.pseudo_avg != PseudoAverage::keys);
  if (!sum_acc_read && set(&Policy::sum_acc)) {
    throw Error("policy field 'sum_acc': set to " + p.sum_acc.name() +
                " but nothing sums in it: rowsum=p sums P in pv_acc" +
                (p.shift == Shift::pasa ? ", and pseudo_avg=k takes the mean from the scores' GEMM" : "") +
                " (use rowsum=e)");
  }
  if (p.mma_k != 0 && !p.qk_acc.narrower_than_fp32() && !p.pv_acc.narrower_than_fp32()) {
    throw Error(text::format("policy field 'mma_k': {} but both GEMMs accumulate in fp32 or wider ({}, {}), "
                             "which the emulator sums product by product (it models steps only in an "
                             "accumulator of fewer than fp32's 24 significant bits: qk_acc or pv_acc); set "
                             "mma_k=0", p.mma_k, p.qk_acc.name(), p.pv_acc.name()));
  }
  // Q's smoothing adds dS = q_m K^T to the scores; under PASA it would have to be q_m K'^T, added before
  // the pseudo-average is taken, which the emulator does not model (it would return wrong O and LSE).
  if (p.shift == Shift::pasa && p.smooth_q) {
    throw Error("policy field 'smooth_q': Q's smoothing is not modelled with shift=pasa (its correction "
                "q_m K^T would need PASA's shifted K'); set smooth_q=0");
  }
  // PASA forms K' from each key block's column sums, which the emulator accumulates in qk_acc: s2 keys of
  // up to the input format's largest value. Past the range of a qk_acc narrower than fp32's they
  // overflow where scores without the shift would not (pasa,qk_acc=fp16 gave 100% NaN on keys of mean
  // 600, where fa16,qk_acc=fp16 is finite); an accumulator of fp32's range holds any the GEMM does.
  if (p.shift == Shift::pasa && p.qk_acc.max_finite() < Format::fp32().max_finite() &&
      p.block_kv * p.input.max_finite() > p.qk_acc.max_finite()) {
    throw Error(text::format("policy field 'qk_acc': {} cannot hold PASA's column sums of a key block, s2 = {} keys "
                             "each up to {}'s {:g} ({:g}): they pass {:g} at keys of {:g}; use an accumulator "
                             "of fp32's range (fp32, bf16)",
                             p.qk_acc.name(), p.block_kv, p.input.name(), p.input.max_finite(),
                             p.block_kv * p.input.max_finite(), p.qk_acc.max_finite(),
                             p.qk_acc.max_finite() / p.block_kv));
  }
  if (p.shift == Shift::pasa && (p.q_quant || p.k_quant)) {
    throw Error("policy field 'shift': pasa shifts K before any quantization of Q or K is modelled; "
                "set q_quant=none and k_quant=none");
  }
  if (!std::isfinite(p.phi) || !(p.window_lo < p.window_hi)) {
    throw Error(text::format("policy field 'phi'/'window_lo'/'window_hi': phi must be finite and "
                             "window_lo < window_hi (got {}, {}, {})", p.phi, p.window_lo, p.window_hi));
  }
  // (x - phi is formed in the softmax format, held in fp32 by the kernels: a phi beyond either's range
  // is inf there, and every weight 0 or NaN)
  if (const double limit = std::min(Format::fp32().max_finite(), p.softmax.max_finite());
      p.shift == Shift::unified && std::fabs(p.phi) > limit) {
    throw Error(text::format("policy field 'phi': {:g} is outside [-{:g}, {:g}], the range of fp32 and of the "
                             "softmax format {}", p.phi, limit, limit, p.softmax.name()));
  }
  if (p.shift != Shift::unified && p.phi != Policy{}.phi) {
    throw Error("policy field 'phi': set to " + text::format("{}", p.phi) + " but shift=" + shift_name(p.shift) +
                " ignores it (FlashDecoding++'s unified maximum: use shift=unified)");
  }
  if (p.shift != Shift::unified && (p.window_lo != Policy{}.window_lo || p.window_hi != Policy{}.window_hi)) {
    throw Error("policy field 'window_lo'/'window_hi': FlashDecoding++'s recompute window is set but shift=" +
                shift_name(p.shift) + " ignores it (it is not a sliding window: pass window_size to the "
                "attention call for one)");
  }
  if (p.splits < 1 || p.splits > kMaxSplits) {
    throw Error(text::format("policy field 'splits': {} is outside 1..{}", p.splits, kMaxSplits));
  }
  for (auto [key, b] : {std::pair{"s1", p.block_q}, {"s2", p.block_kv}}) {
    if (b < 1 || b > kMaxBlock) {
      throw Error(std::string("policy field '") + key + "': block size " + std::to_string(b) +
                  " is outside 1.." + std::to_string(kMaxBlock));
    }
  }
  for (auto [key, n, lo] : {std::tuple{"mma_k", p.mma_k, 0}, {"pv_blocks", p.pv_blocks, 1}}) {
    if (n < lo || n > kMaxBlock) {
      throw Error(text::format("policy field '{}': {} is outside {}..{}", key, n, lo, kMaxBlock));
    }
  }
  // P <= 1 times p_scale is carried in fp32 and then rounded to p: past either's largest finite value
  // every P near the row's maximum would round to inf or NaN, or (a saturating or integer p) clamp to
  // p's largest value, where they would all weigh the same.
  const double p_scale_max = std::min<double>(FLT_MAX, p.p.max_finite());
  if (!(p.p_scale > 0.0 && p.p_scale <= p_scale_max)) {
    throw Error(text::format("policy field 'p_scale': {} is outside (0, {:g}] (P up to 1 times it must stay "
                             "finite in fp32 and within p = {}, unclamped)", p.p_scale, p_scale_max, p.p.name()));
  }
  // At the other end, P = 1 (the weight of the row's maximum, which every row with a key has) times
  // p_scale must be a normal number of p, and of pv_acc and o, which carry the scaled P V until O~ is
  // divided by p_scale: below, every weight underflows (O = 0, or NaN where l sums P as rounded) or
  // keeps only a subnormal's few bits, while the reference is finite. An integer p needs P = 1 to
  // reach 1.
  const double scaled_one = round_to(p.p, round_to(Format::fp32(), p.p_scale));
  // The formats that carry the scaled P: p, pv_acc and o, and with rowsum=p `softmax`, where a block's
  // sum of the scaled P is rounded before it is divided by p_scale. (An array, not a vector: validate
  // runs on every call.)
  const std::pair<const char*, Format> carrier_list[] = {
      {"p", p.p}, {"pv_acc", p.pv_acc}, {"o", p.o}, {"softmax", p.softmax}};
  const std::span<const std::pair<const char*, Format>> carriers(carrier_list, p.rowsum == RowSum::p ? 4 : 3);
  for (auto [key, f] : carriers) {
    const double smallest = f.is_integer() ? 1.0 : f.min_normal();
    if (scaled_one < smallest) {
      throw Error(text::format("policy field 'p_scale': {} is too small: P = 1 (the weight of a row's maximum) "
                               "times it is {} in {} (p), below {:g}, {}'s smallest {} value ({}), so the "
                               "weights would underflow or lose their precision; use p_scale >= {:g}",
                               p.p_scale, scaled_one, p.p.name(), smallest, f.name(),
                               f.is_integer() ? "nonzero" : "normal", key, smallest));
    }
  }
  // A key block of weight-1 keys sums to s2 times the scaled P = 1: with rowsum=p that sum is carried in
  // pv_acc and rounded to `softmax` (past either's largest value l is inf, O = 0 and the LSE inf:
  // sage8,softmax=fp16,s2=256 from 147 keys), and against V's values of magnitude 1 (normal inputs)
  // pv_acc and o carry it as a block's P V (fa16,p_scale=57344 overflowed 78% of its N(0, 1) outputs).
  // Refused where that block passes a carrier's largest value; larger |v| meet the formats' own
  // limits (docs/numerics.md), and with V quantized the check below is the stricter one. A two-level
  // pv_acc of several blocks (pv_blocks) carries their sum.
  for (auto [key, f] : carriers.subspan(1)) {  // (P's own format holds one weight, not a block's sum)
    const bool blocks = std::string(key) == "pv_acc" && p.two_level && p.pv_blocks > 1;
    const double keys = double(p.block_kv) * (blocks ? p.pv_blocks : 1);
    const double block_sum = keys * scaled_one;
    if (f.is_integer() || block_sum <= f.max_finite()) continue;
    const double max = f.max_finite();
    const double advice = advised_scale(max / keys, [&](double x) {
      return keys * round_to(p.p, round_to(Format::fp32(), x)) <= max;
    });
    const std::string what = blocks ? text::format("pv_blocks = {} key blocks of s2 = {} ({:g} keys)", p.pv_blocks,
                                                   p.block_kv, keys)
                                    : text::format("a key block of s2 = {} keys", p.block_kv);
    throw Error(text::format("policy field 'p_scale': {} is too large for {} = {}: {} "
                             "of weight 1 sums to {:g} scaled weights{}, past its largest value {:g}; use "
                             "p_scale <= {:g}", p.p_scale, key, f.name(), what, block_sum,
                             std::string(key) == "softmax" ? " (rowsum=p)" : " (times |v| = 1)", max, advice));
  }
  // With V quantized (one scale per channel, so every channel's largest |v| becomes v_quant's largest
  // value), the scaled P~ V has terms up to p_scale times that value, and pv_acc and o carry their sums:
  // pv_acc one block's (two-level) or the row's, o the row's, before O~ is divided by l. The row's
  // weights add up to l, which grows with the row's length (bounded here by kMaxRowKeys), except under
  // PASA's headroom (pasa_headroom.h): where that many terms pass the format's largest value, rows where
  // many keys of weight about 1 meet V's largest values overflow (fa16,v_quant=e5m2 gave 30% of its
  // N(0, 1) outputs at fp16's largest value or NaN at 256 keys).
  if (p.v_quant) {
    constexpr double kMaxRowKeys = 2147483648.0;  // 2^31 keys: any row a call can have
    const double term = round_to(Format::fp32(), p.p_scale) * p.v_quant->max_finite();
    // A row's sum: bounded by PASA's headroom, else by its length. (Against a row of 2^31 keys, a p_scale
    // small enough would underflow P = 1: no p_scale is offered there.)
    const bool pasa = p.shift == Shift::pasa;
    const double row_keys = pasa ? pasa_largest_row_sum(p.block_kv) : kMaxRowKeys;
    const std::string row = pasa ? text::format("{:g} keys' (PASA's largest row sum)", row_keys) : "a row's (up to 2^31 keys)";
    const double pv_keys = std::min(double(p.block_kv) * p.pv_blocks, row_keys);
    const std::string block = p.pv_blocks == 1 ? text::format("{:g} keys' (a key block, s2)", double(p.block_kv))
                                               : text::format("{:g} keys' (pv_blocks key blocks of s2)", pv_keys);
    for (auto [key, f, keys, span] : {std::tuple{"pv_acc", p.pv_acc, p.two_level ? pv_keys : row_keys,
                                                 p.two_level && pv_keys < row_keys ? block : row},
                                      std::tuple{"o", p.o, row_keys, row}}) {
      if (f.is_integer() || keys * term <= f.max_finite()) continue;
      const double after = std::floor(f.max_finite() / term) + 1.0;  // keys of weight 1 that pass it
      // (named copies: clang 14 captures no structured binding)
      const double vmax = p.v_quant->max_finite(), max = f.max_finite(), n = keys;
      const std::string scaled =
          n == kMaxRowKeys ? std::string()
                           : text::format("p_scale <= {:g}", advised_scale(max / (n * vmax), [&](double x) {
                               return n * round_to(Format::fp32(), x) * vmax <= max;
                             }));
      const std::string remedy = f.exp_bits < 8 ? text::format("{}=fp32 or bf16{}{}", key, scaled.empty() ? "" : ", or ",
                                                               scaled)
                                                : (scaled.empty() ? "a v_quant of smaller values" : scaled);
      throw Error(text::format("policy field '{}': {} cannot hold the sum of {} P~ V terms, each up to p_scale {} times "
                               "{:g} (v_quant = {}'s largest value, which every channel of V reaches) = {:g}: it "
                               "passes {:g} after {:g} {} of weight 1 at V's largest values; use {}", key, f.name(),
                               span, p.p_scale, p.v_quant->max_finite(), p.v_quant->name(), term, f.max_finite(),
                               after, after == 1.0 ? "key" : "keys", remedy));
    }
  }
  // Likewise with Q and K both quantized (each group's largest |x| becomes the quantizer's largest
  // value): a score sums, over up to 2^10 channels, terms up to the product of the two largest values,
  // which qk_acc carries (sage8,k_quant=bf16: 127 x 3.4e38 overflows fp32 on every input;
  // sage8,qk_acc=fp16: 127 x 127 x 128 channels overflows fp16 on constant rows at head dim 128).
  if (p.q_quant && p.k_quant && !p.qk_acc.is_integer()) {
    const double term = p.q_quant->max_finite() * p.k_quant->max_finite();
    if (term * 0x1p10 > p.qk_acc.max_finite()) {
      throw Error(text::format("policy field 'q_quant'/'k_quant': {} x {} quantize Q and K to largest values whose "
                               "product {:g}, summed over up to 2^10 channels ({:g}), is past qk_acc = {}'s {:g}: "
                               "scores of rows that reach those values would overflow; use qk_acc=fp32 (or int32 for integer "
                               "quantizers)",
                               p.q_quant->name(), p.k_quant->name(), term, term * 0x1p10, p.qk_acc.name(),
                               p.qk_acc.max_finite()));
    }
  }
  // One side quantized: its terms reach the quantizer's largest value times the other side's values,
  // which a quantizer of a wide range (fp32, bf16) makes overflow at ordinary magnitudes. Refused where
  // values of up to 2^10 over 2^10 channels would (exact,k_quant=fp32 gave NaN on all-ones inputs).
  if ((p.q_quant != std::nullopt) != (p.k_quant != std::nullopt) && !p.qk_acc.is_integer()) {
    const Format& quant = p.q_quant ? *p.q_quant : *p.k_quant;
    const char* key = p.q_quant ? "q_quant" : "k_quant";
    const double term = quant.max_finite() * 0x1p20;
    if (term > p.qk_acc.max_finite()) {
      throw Error(text::format("policy field '{}': {} quantizes {} to groups whose largest value is {:g}, the other "
                               "operand stays unquantized, and qk_acc = {} ({:g}) cannot hold the scores of values up "
                               "to 2^10 over 2^10 channels (2^20 times {:g}); quantize both, or use a quantizer of "
                               "a smaller range (int8, e4m3)", key, quant.name(), p.q_quant ? "Q" : "K",
                               quant.max_finite(), p.qk_acc.name(), p.qk_acc.max_finite(), quant.max_finite()));
    }
  }
  if (p.shift == Shift::unified) check_unified_window(p);
  // Per-warp and per-thread query groups are 16-row slabs of a query block; per-thread key groups
  // repeat every 8 keys of a key block.
  auto slab_gran = [](Granularity g) { return g == Granularity::warp || g == Granularity::thread; };
  if (p.q_quant && slab_gran(p.q_gran) && p.block_q % 16 != 0) {
    throw Error(text::format("policy field 's1': {} must be a multiple of 16 for q_gran={}", p.block_q,
                             granularity_name(p.q_gran)));
  }
  if (p.k_quant && p.k_gran == Granularity::thread && p.block_kv % 8 != 0) {
    throw Error(text::format("policy field 's2': {} must be a multiple of 8 for k_gran=thread", p.block_kv));
  }
}

}  // namespace pasa
