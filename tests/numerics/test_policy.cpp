// SPDX-License-Identifier: Apache-2.0
// Policies: presets, the text form (print, parse, round trip) and validation errors naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <clocale>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <string_view>

#include "numerics/rounder.h"
#include "pasa/policy.h"
#include "test_util.h"

namespace pasa {
namespace {

using test::expect_error;

TEST(Policy, PresetsHoldThePapersAllocations) {
  const Policy exact = preset_policy("exact");
  EXPECT_EQ(exact.s, Format::fp32());
  EXPECT_EQ(exact.p, Format::fp32());
  const Policy mixed = preset_policy("fa16_fp32");
  EXPECT_EQ(mixed.s, Format::fp16());
  EXPECT_EQ(mixed.softmax, Format::fp32());
  EXPECT_EQ(mixed.o, Format::fp32());
  const Policy low = preset_policy("fa16");
  EXPECT_EQ(low.softmax, Format::fp16());
  EXPECT_EQ(low.o, Format::fp16());
  const Policy pasa = preset_policy("pasa");
  EXPECT_EQ(pasa.shift, Shift::pasa);
  EXPECT_DOUBLE_EQ(pasa.beta, 0.984497);
  EXPECT_EQ(pasa.block_q, 128);
  EXPECT_EQ(pasa.block_kv, 128);
  EXPECT_EQ(pasa.scale, ScalePlacement::key);
  for (const auto& name : preset_names()) EXPECT_EQ(to_string(preset_policy(name)), name);
}

TEST(Policy, TextRoundTrip) {
  for (const char* text : {"pasa,beta=0.968994,s2=64", "exact,p=bf16,input=bf16", "fa16,scale=k",
                           "fa16_fp32,s=e5m10,pv_acc=fp22", "pasa,softmax=fp32,o=fp32,s1=64"}) {
    const Policy p = parse_policy(text);
    EXPECT_EQ(parse_policy(to_string(p)), p) << text;
  }
  EXPECT_EQ(to_string(parse_policy(" pasa , s2 = 64 , beta=0.968994 ")), "pasa,beta=0.968994,s2=64");
  EXPECT_EQ(to_string(parse_policy("pasa,beta=0.984497")), "pasa");
}

// A program that set a locale with a decimal comma still reads the numbers to_string wrote (a locale
// built for the test from glibc's sources; skipped where they are not installed).
TEST(Policy, NumbersParseWhateverTheLocale) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pasa-locale-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string build = "localedef -i de_DE -f UTF-8 " + (dir / "de_DE.UTF-8").string() + " > /dev/null 2>&1";
  const bool built = std::system(build.c_str()) == 0;
  setenv("LOCPATH", dir.c_str(), 1);
  const bool set = built && setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr;
  Policy parsed;
  std::string error;
  try {
    parsed = parse_policy("pasa,beta=0.968994");
  } catch (const Error& e) {
    error = e.what();
  }
  setlocale(LC_NUMERIC, "C");
  unsetenv("LOCPATH");
  std::filesystem::remove_all(dir);
  if (!set) GTEST_SKIP() << "no de_DE locale could be built from glibc's sources here";
  EXPECT_EQ(error, "");
  EXPECT_EQ(parsed.beta, 0.968994);
}

TEST(Policy, EqualityCoversEveryTextField) {
  // One valid override per key of the text form (README's list), on a preset it changes: each must
  // make the policy differ from its preset, in the text and under operator==.
  const std::pair<const char*, const char*> overrides[] = {
      {"exact", "input=fp16"},  {"exact", "qk_acc=fp16"},    {"exact", "s=fp16"},
      {"exact", "scale=q"},     {"exact", "softmax=fp16"},   {"exact", "sum_acc=fp16"},
      {"exact", "p=bf16"},      {"exact", "pv_acc=fp16"},    {"exact", "o=bf16"},
      {"exact", "s1=32"},       {"exact", "s2=32"},          {"exact", "smooth_q=1"},
      {"exact", "smooth_k=1"},  {"exact", "smooth_v=1"},     {"exact", "p_scale=2"},
      {"exact", "two_level=0"}, {"exact", "splits=3"},       {"pasa", "beta=0.5"},
      {"pasa", "pseudo_avg=k"}, {"sage8", "q_quant=int4"},   {"sage8", "k_quant=int4"},
      {"sage8", "q_gran=warp"}, {"sage8", "k_gran=warp"},    {"sage8", "v_quant=e5m2"},
      {"fdpp", "shift=none"},   {"fdpp", "phi=1"},           {"fdpp", "window_lo=-9"},
      {"fdpp", "window_hi=5"},  {"sage8", "p_max=running"}, {"exact", "exp_base=2"},
      {"exact", "rowsum=p"},    {"sage8", "mma_k=16"},     {"pasa_fp16acc", "pv_blocks=2"},
      {"pasa", "reference=average"}};
  for (const auto& [preset, override] : overrides) {
    const Policy base = preset_policy(preset);
    const Policy changed = parse_policy(std::string(preset) + "," + override);
    EXPECT_NE(to_string(changed), preset) << override;
    EXPECT_NE(changed, base) << override;
    EXPECT_EQ(changed, parse_policy(to_string(changed))) << override;
  }
  // Every key of the field table has its override above (a new field needs one, and operator==).
  for (const PolicyField& field : policy_fields()) {
    bool covered = false;
    for (const auto& entry : overrides) {
      const std::string_view text = entry.second;
      covered = covered || text.substr(0, text.find('=')) == field.key;
    }
    EXPECT_TRUE(covered) << field.key << " has no override in EqualityCoversEveryTextField";
  }
}

// A quantized V reaches v_quant's largest value in every channel, so P~ V's terms are up to p_scale times
// it, and pv_acc and o carry their sums: one block's (two-level pv_acc), or the row's, up to 2^31 keys,
// unless PASA's headroom bounds the row sum (1024 + s2). Otherwise rows where many keys of weight about 1
// meet V's largest values overflow (fa16,v_quant=e5m2: 30% of N(0, 1) outputs at fp16's largest value or
// NaN at 256 keys). The presets and the study's P and V variants pass.
TEST(Policy, PVsSumsMustFitTheirAccumulators) {
  expect_error([] { parse_policy("sage8,o=fp16"); }, "policy field 'o': fp16 cannot hold the sum of a row's (up to 2^31 keys) P~ V terms");
  expect_error([] { parse_policy("sage8,o=fp16"); }, "passes 65504 after 1 key of weight 1");
  expect_error([] { parse_policy("fa16,v_quant=e4m3"); }, "passes 65504 after 147 keys of weight 1");
  expect_error([] { parse_policy("fa16,v_quant=e5m2,o=fp32,pv_acc=fp16"); }, "policy field 'pv_acc'");
  expect_error([] { parse_policy("sage8,pv_acc=fp16"); }, "policy field 'pv_acc': fp16 cannot hold the sum of 128 keys' (a key block, s2)");
  expect_error([] { parse_policy("sage8,two_level=0,pv_acc=fp16"); }, "policy field 'pv_acc': fp16 cannot hold the sum of a row's");
  // Two keys at bf16's largest value pass fp32's.
  expect_error([] { parse_policy("sage8,p=fp16,p_scale=1,v_quant=bf16,pv_acc=fp32"); },
               "policy field 'pv_acc': fp32 cannot hold the sum of 128 keys' (a key block, s2) P~ V terms");
  // PASA's headroom keeps the row sum below 1024 + s2: 1152 x 7 (int4) fits fp16, 1152 x 448 does not.
  EXPECT_NO_THROW(parse_policy("pasa,v_quant=int4"));
  expect_error([] { parse_policy("pasa,v_quant=e4m3"); }, "1152 keys' (PASA's largest row sum)");
  EXPECT_NO_THROW(parse_policy("fa16,v_quant=e4m3,o=fp32"));
  EXPECT_NO_THROW(parse_policy("fa16,v_quant=e4m3,o=bf16"));
  for (const char* text : {"sage8", "sage_fp8", "sage4", "sage8,p=int8,p_scale=127,v_quant=int8",
                           "sage8,p=e5m2,p_scale=57344,v_quant=e5m2", "sage8,p=fp16,p_scale=1,v_quant=none,pv_acc=fp32"}) {
    EXPECT_NO_THROW(parse_policy(text)) << text;
  }
}

// Q and K quantized to formats whose largest values, multiplied and summed over up to 2^10 channels,
// pass the scores' accumulator overflow on rows that reach them (sage8,qk_acc=fp16 gave NaN on
// constant rows at head dim 128): refused like sage8,o=fp16.
TEST(Policy, QuantizersWhoseLargestProductOverflowsAreRefused) {
  for (const char* text : {"sage8,k_quant=bf16", "sage8,q_quant=fp32", "sage4,k_quant=fp22", "sage8,qk_acc=fp16",
                           "sage8,qk_acc=e5m7", "sage8,q_quant=e4m3,qk_acc=fp16"}) {
    SCOPED_TRACE(text);
    expect_error([&] { parse_policy(text); }, "policy field 'q_quant'/'k_quant'");
  }
  EXPECT_NO_THROW(parse_policy("sage8,q_quant=e4m3,k_quant=e4m3"));
  EXPECT_NO_THROW(parse_policy("sage8,k_quant=fp16"));    // 127 x 65504 x 2^10
  EXPECT_NO_THROW(parse_policy("sage4,qk_acc=fp16"));     // 7 x 7 x 2^10 = 50176
  EXPECT_NO_THROW(parse_policy("sage8,qk_acc=fp32"));     // the advice
}

// One side quantized to a wide range (its groups' largest values become 3.4e38) overflowed the scores
// at ordinary magnitudes: exact,k_quant=fp32 gave NaN on all-ones inputs. Refused; narrow quantizers
// of one side run.
TEST(Policy, AOneSidedQuantizerOfAWideRangeIsRefused) {
  for (const char* text : {"exact,k_quant=fp32", "exact,q_quant=bf16", "fa16_fp32,k_quant=fp22",
                           "sage8,q_quant=none,k_quant=bf16,smooth_k=0"}) {
    SCOPED_TRACE(text);
    expect_error([&] { parse_policy(text); }, "the other operand stays unquantized");
  }
  EXPECT_NO_THROW(parse_policy("exact,k_quant=int8"));
  EXPECT_NO_THROW(parse_policy("sage8,q_quant=none"));
}

TEST(Policy, ErrorsNameTheField) {
  expect_error([] { parse_policy("flash"); }, "unknown policy 'flash'");
  // A NUL in the caller's text is shown, not where the message stops (what() reads up to one).
  expect_error([] { preset_policy(std::string("pasa\0x", 6)); }, "unknown policy 'pasa\\x00x'");
  expect_error([] { parse_policy(""); }, "empty");
  expect_error([] { parse_policy("pasa,gamma=1"); }, "unknown key 'gamma'");
  expect_error([] { parse_policy("pasa,beta"); }, "'beta' is not key=value");
  expect_error([] { parse_policy(std::string_view("exact\0pasa", 10)); }, "control character 0x00 at byte 5");
  EXPECT_EQ(parse_policy("pasa,\n s2=64\t"), parse_policy("pasa,s2=64"));  // white space is trimmed
  expect_error([] { parse_policy("pasa,beta=1"); }, "'beta': 1 is outside [0, 1) (beta = 1 makes the shifting matrix singular)");
  try {  // (the singular matrix is beta = 1's reason only)
    parse_policy("pasa,beta=-0.5");
    ADD_FAILURE() << "beta = -0.5 was taken";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "policy field 'beta': -0.5 is outside [0, 1)");
  }
  expect_error([] { parse_policy("pasa,beta=-0.1"); }, "'beta'");
  expect_error([] { parse_policy("pasa,beta=abc"); }, "'beta': 'abc' is not a number");
  expect_error([] { parse_policy("exact,beta=0.5"); }, "shift=none ignores it");
  expect_error([] { parse_policy("pasa,s2=0"); }, "'s2': block size 0");
  expect_error([] { parse_policy("pasa,s1=2000"); }, "'s1': block size 2000");
  expect_error([] { parse_policy("pasa,s2=1.5"); }, "'s2': '1.5' is not an integer");
  // Integers past what the field's int holds are out of range, not "not an integer"; below 2^31 the
  // block size's own range check names them.
  expect_error([] { parse_policy("pasa,s2=3000000000"); }, "'s2': 3000000000 is out of range (must be in 1..1024)");
  expect_error([] { parse_policy("pasa,s1=2147483648"); }, "'s1': 2147483648 is out of range (must be in 1..1024)");
  expect_error([] { parse_policy("fdpp,splits=-1e10"); }, "'splits': -1e10 is out of range (must be in 1..1024)");
  expect_error([] { parse_policy("pasa,s2=1500000000"); }, "'s2': block size 1500000000 is outside 1..1024");
  // Past a double's range is out of range too (an integer field naming its own range), not "not a
  // number"; a subnormal is a value like any other, and below the smallest one rounds to 0.
  expect_error([] { parse_policy("exact,s2=1e400"); }, "'s2': 1e400 is out of range (must be in 1..1024)");
  expect_error([] { parse_policy("pasa,beta=1e400"); }, "'beta': 1e400 is out of range (a double's largest");
  expect_error([] { parse_policy("fdpp,phi=1e309"); }, "'phi': 1e309 is out of range (a double's largest");
  expect_error([] { parse_policy("fdpp,phi=-1e309"); }, "'phi': -1e309 is out of range");
  EXPECT_EQ(parse_policy("pasa,beta=1e-310").beta, 1e-310);
  EXPECT_EQ(parse_policy("fdpp,phi=1e-320").phi, 1e-320);
  // phi is subtracted in the softmax format, held in fp32: beyond either's range it is inf there.
  expect_error([] { parse_policy("fdpp,phi=1e39"); }, "'phi': 1e+39 is outside [-3.40282e+38, 3.40282e+38]");
  expect_error([] { parse_policy("fdpp,softmax=bf16,phi=-3.4e38"); }, "the range of fp32 and of the softmax format bf16");
  EXPECT_EQ(parse_policy("fdpp,phi=-3.4e38").phi, -3.4e38);
  // -0 equals 0, so it prints as 0 (left out where the preset has 0): equal policies, one text.
  EXPECT_EQ(to_string(parse_policy("fdpp,phi=-0")), "fdpp");
  EXPECT_EQ(to_string(parse_policy("exact,beta=-0")), "exact");
  EXPECT_EQ(to_string(parse_policy("fdpp,window_lo=-0")), to_string(parse_policy("fdpp,window_lo=0")));
  EXPECT_EQ(parse_policy("pasa,beta=1e-400").beta, 0.0);
  expect_error([] { parse_policy("exact,s2=1e-320"); }, "'s2': '1e-320' is not an integer");
  expect_error([] { parse_policy("exact,s=int8"); }, "'s': int8 is an integer format");
  expect_error([] { parse_policy("exact,softmax=e4m3"); }, "'softmax': e4m3 has no infinity");
  expect_error([] { parse_policy("exact,p=fp64"); }, "'p': fp64 is wider than fp32");
  expect_error([] { parse_policy("exact,o=fp99"); }, "policy field 'o': unknown number format 'fp99'");
  expect_error([] { parse_policy("exact,scale=x"); }, "'scale': 'x' is not one of s, q, k");
  expect_error([] { parse_policy("exact,window_lo=-5"); }, "it is not a sliding window");
  expect_error([] { parse_policy("pasa,window_hi=5"); }, "shift=pasa ignores it");
  expect_error([] { parse_policy("pasa_accurate,smooth_q=1"); }, "'smooth_q': Q's smoothing is not modelled");
  expect_error([] { parse_policy("exact,shift=pasa,beta=0.9,smooth_q=1"); }, "set smooth_q=0");
  EXPECT_EQ(parse_policy("fdpp,window_lo=-5").window_lo, -5.0);
  expect_error([] { parse_policy("exact,phi=3"); }, "'phi': set to 3 but shift=none ignores it");
  EXPECT_EQ(parse_policy("fdpp,phi=3").phi, 3.0);
  expect_error([] { parse_policy("exact,shift=max"); }, "'shift': 'max' is not one of none, pasa, unified");
  // Fields that only a quantizer, two-level accumulation or a softmax row sum reads: the CPU ran each
  // of these bit for bit as the policy without the field.
  expect_error([] { parse_policy("exact,q_gran=tensor"); }, "'q_gran': set to tensor but q_quant=none ignores it");
  expect_error([] { parse_policy("exact,k_gran=token"); }, "'k_gran': set to token but k_quant=none ignores it");
  EXPECT_EQ(parse_policy("sage8,k_gran=token").k_gran, Granularity::token);
  expect_error([] { parse_policy("fa16,two_level=0,p_max=running"); }, "'p_max': set to running but two_level=0");
  expect_error([] { parse_policy("pasa_fp16acc,two_level=0,pv_blocks=1,p_max=block"); },
               "'p_max': set to block but two_level=0");
  expect_error([] { parse_policy("sage8,sum_acc=e5m2"); }, "'sum_acc': set to e5m2 but nothing sums in it");
  expect_error([] { parse_policy("fa16,rowsum=p,sum_acc=fp16"); }, "rowsum=p sums P in pv_acc");
  EXPECT_EQ(parse_policy("fa16,sum_acc=fp16").sum_acc, Format::fp16());  // rowsum=e sums in it
  EXPECT_EQ(parse_policy("pasa,sum_acc=fp16,pseudo_avg=s").sum_acc, Format::fp16());  // the block's mean
  expect_error([] { parse_policy("pasa,sum_acc=fp16,pseudo_avg=k"); }, "pseudo_avg=k takes the mean");
  expect_error([] { parse_policy("fa16,mma_k=16"); }, "'mma_k': 16 but both GEMMs accumulate in fp32 or wider");
  expect_error([] { parse_policy("exact,pv_acc=fp64,mma_k=16"); }, "accumulate in fp32 or wider (fp32, fp64)");
  EXPECT_EQ(parse_policy("fa16,pv_acc=fp16,mma_k=16").mma_k, 16);
  expect_error([] { parse_policy("fa16,two_level=0,pv_blocks=4"); }, "'pv_blocks': 4 but two_level=0 ignores it");
  expect_error([] { parse_policy("pasa_fp16acc,two_level=0"); }, "set pv_blocks=1");
  expect_error([] { parse_policy("fa16,pv_blocks=4"); }, "'pv_blocks': 4 blocks in one pv_acc need P against the running");
  expect_error([] { parse_policy("pasa_fp16acc,pv_acc=fp32"); }, "set mma_k=0");
  EXPECT_EQ(parse_policy("fa16,pv_blocks=4,p_max=running").pv_blocks, 4);
  // A pv_acc of four blocks carries their sum: 512 weight-1 keys times p_scale 200 pass fp16's 65504
  // (one block of 128 would not: every output came out NaN).
  EXPECT_NO_THROW(parse_policy("fa16,o=fp32,softmax=fp32,pv_acc=fp16,mma_k=16,p_scale=200"));
  expect_error([] { parse_policy("fa16,o=fp32,softmax=fp32,pv_acc=fp16,mma_k=16,p_scale=200,pv_blocks=4,p_max=running"); },
               "'p_scale': 200 is too large for pv_acc = fp16: pv_blocks = 4 key blocks of s2 = 128 (512 keys)");
  // A preset's own value is not set by the text: sage4's warp groups stay without its quantizers.
  EXPECT_EQ(parse_policy("sage4,q_quant=none,k_quant=none,smooth_q=0,smooth_k=0").q_gran, Granularity::warp);
  expect_error([] { parse_policy("sage4,q_quant=none,q_gran=token"); }, "'q_gran': set to token but q_quant=none");
}

// P = 1, the weight of each row's maximum, times p_scale must be a normal number of p (1 for an
// integer p) and of pv_acc and o, which carry the scaled P V: below, the weights underflow (sage8 at
// 1e-30: every P~ 0, O = 0 or NaN) or keep a few bits (e4m3 subnormals below 2^-6).
TEST(Policy, PScaleKeepsTheLargestWeightNormal) {
  expect_error([] { parse_policy("sage8,p_scale=1e-30"); },
               "policy field 'p_scale': 1e-30 is too small: P = 1 (the weight of a row's maximum) times it is 0 in "
               "e4m3 (p), below 0.015625, e4m3's smallest normal value");
  expect_error([] { parse_policy("sage8,p_scale=0.01"); }, "is 0.009765625 in e4m3 (p), below 0.015625");
  EXPECT_EQ(parse_policy("sage8,p_scale=0.015625").p_scale, 0.015625);
  expect_error([] { parse_policy("fa16,p_scale=1e-7"); }, "below 6.10352e-05, fp16's smallest normal value");
  expect_error([] { parse_policy("exact,p=int8,p_scale=0.5"); }, "is 0 in int8 (p), below 1");
  EXPECT_EQ(parse_policy("exact,p=int8,p_scale=1").p_scale, 1.0);
  // fp32 P, but O accumulated in fp16: the scaled P V would underflow there.
  expect_error([] { parse_policy("exact,o=fp16,p_scale=1e-6"); }, "below 6.10352e-05, fp16's smallest normal value "
                                                                  "(o)");
  for (const std::string& name : preset_names()) EXPECT_NO_THROW(validate(preset_policy(name))) << name;
}

// PASA's column sums of a key block are accumulated in qk_acc: s2 keys of the input format's largest
// value must fit there (pasa,qk_acc=fp16 gave 100% NaN on keys of mean 600, finite without the shift).
TEST(Policy, PasaColumnSumsFitTheScoresAccumulator) {
  expect_error([] { parse_policy("pasa,qk_acc=fp16,mma_k=16"); },
               "policy field 'qk_acc': fp16 cannot hold PASA's column sums of a key block, s2 = 128 keys each up "
               "to fp16's 65504 (8.38451e+06): they pass 65504 at keys of 511.75");
  expect_error([] { parse_policy("pasa_accurate,qk_acc=fp16"); }, "cannot hold PASA's column sums");
  EXPECT_NO_THROW(parse_policy("pasa,qk_acc=bf16"));
  EXPECT_NO_THROW(parse_policy("fa16,qk_acc=fp16"));  // (no shift: no column sums)
  // (fp32 inputs into an fp32 accumulator: as the scores' GEMM itself)
  EXPECT_NO_THROW(parse_policy("pasa_accurate,input=fp32,s=fp32,softmax=fp32,sum_acc=fp32,pv_acc=fp32,o=fp32"));
}

// At the top, P = 1 times p_scale must lie within p: a saturating or integer p would clamp every weight
// near the row's maximum to p's largest value, all weighing the same (sage4,p=int8 kept sage4's 448:
// O = (127 / 448) V for one key, relative RMSE 0.53 on N(0, 1)).
TEST(Policy, PScaleKeepsTheLargestWeightUnclamped) {
  expect_error([] { parse_policy("sage4,p=int8"); },
               "policy field 'p_scale': 448 is outside (0, 127] (P up to 1 times it must stay finite in fp32 and "
               "within p = int8, unclamped)");
  expect_error([] { parse_policy("exact,p=int8,p_scale=127.5"); }, "127.5 is outside (0, 127]");
  expect_error([] { parse_policy("fa16_fp32,p=e4m3:sat,p_scale=1000"); }, "1000 is outside (0, 448]");
  EXPECT_EQ(parse_policy("sage8,p=int8,p_scale=127").p_scale, 127.0);
  EXPECT_EQ(parse_policy("fa16_fp32,p=e4m3:sat,p_scale=448").p_scale, 448.0);
}

// A key block of s2 weight-1 keys sums to s2 times the scaled P = 1: with rowsum=p in pv_acc and then
// rounded to `softmax` before the division by p_scale (past its largest value l was inf, O = 0 and
// the LSE inf), and as a block's P V against |v| = 1 in pv_acc and o (fa16,p_scale=57344 overflowed 78%
// of N(0, 1) outputs). With rowsum=p, P = 1 times p_scale must also be normal in `softmax` (at 1e-9
// in fp16, l was 0, O inf and the LSE -inf).
TEST(Policy, PScaleKeepsAKeyBlockOfWeightOneFinite) {
  expect_error([] { parse_policy("sage8,softmax=fp16,s2=256"); },
               "policy field 'p_scale': 448 is too large for softmax = fp16: a key block of s2 = 256 keys of weight 1 "
               "sums to 114688 scaled weights (rowsum=p), past its largest value 65504; use p_scale <= 247.999");
  // (the advice holds: 255.875 itself rounds to 256 in e4m3, whose block passes 65504)
  EXPECT_NO_THROW(parse_policy("sage8,softmax=fp16,s2=256,p_scale=247.999"));
  expect_error([] { parse_policy("sage8,softmax=fp16,s2=256,p_scale=255.875"); }, "too large for softmax");
  EXPECT_NO_THROW(parse_policy("sage8,softmax=fp16"));  // 128 x 448 = 57344
  expect_error([] { parse_policy("sage8,softmax=e4m3ieee"); }, "too large for softmax = e4m3ieee");
  expect_error([] { parse_policy("fa16,rowsum=p,p_scale=1000"); }, "too large for o = fp16");
  expect_error([] { parse_policy("fa16,p_scale=57344"); }, "(times |v| = 1), past its largest value 65504");
  expect_error([] { parse_policy("pasa,p_scale=57344"); }, "too large for o = fp16");
  expect_error([] { parse_policy("exact,p_scale=1e38"); }, "too large for pv_acc = fp32");
  expect_error([] { parse_policy("exact,softmax=fp16,rowsum=p,p_scale=1e-6"); },
               "below 6.10352e-05, fp16's smallest normal value (softmax)");
  EXPECT_NO_THROW(parse_policy("exact,softmax=fp16,rowsum=p,p_scale=1e-4"));
}

// A policy set field by field in C++ is held to the text form's values: formats parse_format can
// return and enumerators in range, each refused naming the field.
TEST(Policy, FieldsSetInCodeAreValidated) {
  const auto refused = [](const std::function<void(Policy&)>& set, const std::string& message) {
    Policy p = preset_policy("sage8");
    set(p);
    expect_error([&] { validate(p); }, message);
  };
  refused([](Policy& p) { p.qk_acc.man_bits = 60; }, "policy field 'qk_acc': e8m60: exponent bits must be 2..11");
  refused([](Policy& p) { p.o.exp_bits = 0; }, "policy field 'o': e0m23");
  refused([](Policy& p) { p.sum_acc.exp_bits = 40; }, "policy field 'sum_acc': e40m23");
  refused([](Policy& p) { p.o.fn = true; }, "policy field 'o': only e4m3 has an fn");
  refused([](Policy& p) { p.p.overflow = Overflow::to_inf; }, "policy field 'p': e4m3 (fn) has no infinity");
  refused([](Policy& p) { p.s.overflow = static_cast<Overflow>(9); }, "policy field 's': overflow rule (code 9)");
  refused([](Policy& p) { p.input.kind = static_cast<Format::Kind>(7); }, "policy field 'input': format kind (code 7)");
  refused([](Policy& p) { p.q_quant->int_bits = 1; }, "policy field 'q_quant': integer format of 1 bits");
  refused([](Policy& p) { p.k_quant->overflow = Overflow::to_nan; }, "policy field 'k_quant': an integer format saturates");
  // Fields the text form cannot spell (it would print as fp16 or int8 and parse back unequal).
  refused([](Policy& p) { p.o.int_bits = 8; }, "policy field 'o': a floating format has no integer bits");
  refused([](Policy& p) { p.k_quant->exp_bits = 5; }, "policy field 'k_quant': an integer format has no exponent");
  refused([](Policy& p) { p.shift = static_cast<Shift>(9); }, "policy field 'shift': not one of its choices");
  refused([](Policy& p) { p.scale = static_cast<ScalePlacement>(3); }, "policy field 'scale'");
  refused([](Policy& p) { p.exp_base = static_cast<ExpBase>(2); }, "policy field 'exp_base'");
  refused([](Policy& p) { p.pseudo_avg = static_cast<PseudoAverage>(5); }, "policy field 'pseudo_avg'");
  refused([](Policy& p) { p.q_gran = static_cast<Granularity>(9); }, "policy field 'q_gran'");
  // The preset name is what the policy prints from (to_string): an unknown one is refused here, with
  // the known names, not when the policy is first printed.
  refused([](Policy& p) { p.preset = "flash"; },
          "policy field 'preset': 'flash' is not a preset (presets: exact, fa16_fp32, fa16, pasa, pasa_accurate, "
          "pasa_fp16acc, sage8, sage_fp8, sage4, fdpp)");
  refused([](Policy& p) { p.pv_blocks = 0; }, "policy field 'pv_blocks': 0 is outside 1..1024");
  refused([](Policy& p) { p.mma_k = -1; }, "policy field 'mma_k'");
  refused([](Policy& p) { p.preset = "Exact"; }, "policy field 'preset': 'Exact' is not a preset");
  // Every preset, and a format at each end of the ranges, passes.
  for (const std::string& name : preset_names()) EXPECT_NO_THROW(validate(preset_policy(name))) << name;
  Policy wide = preset_policy("exact");
  wide.qk_acc = Format::floating(11, 52);
  wide.s = Format::floating(2, 0);
  EXPECT_NO_THROW(validate(wide));
  // A policy that was never validated still prints (an out-of-range choice as "?") rather than throw.
  Policy bad;
  bad.shift = static_cast<Shift>(9);
  EXPECT_EQ(field_value(bad, "shift"), "?");
}

// The public table lists every text key once, and each key's value reads back as to_string prints it.
TEST(Policy, FieldTableDescribesEveryKey) {
  const Policy p = parse_policy("sage8,smooth_v=1,k_gran=block,splits=2");
  std::set<std::string> keys;
  std::string rebuilt = p.preset;
  for (const PolicyField& f : policy_fields()) {
    EXPECT_TRUE(keys.insert(f.key).second) << f.key;
    EXPECT_FALSE(f.doc.empty()) << f.key;
    EXPECT_EQ(f.kind == FieldKind::choice, !f.choices.empty()) << f.key;
    rebuilt += "," + f.key + "=" + field_value(p, f.key);
  }
  EXPECT_EQ(keys.size(), 34u);
  EXPECT_EQ(parse_policy(rebuilt), p);
  EXPECT_EQ(field_value(preset_policy("fdpp"), "shift"), "unified");
  EXPECT_EQ(field_value(preset_policy("sage8"), "pv_acc"), "fp22");
  expect_error([] { field_value(Policy{}, "gamma"); }, "unknown key 'gamma'");
}

TEST(Rounder, AgreesWithRoundTo) {
  const std::uint64_t seed = test::kFixedSeeds[0];
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(-2.0, 2.0);
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (const Format& f : {Format::fp16(), Format::bf16(), Format::e4m3(), Format::e5m2(), Format::fp22(),
                          Format::fp32(), Format::floating(3, 2), Format::int8(),
                          // Every fraction bit of a double kept: only the range rounds.
                          Format::floating(8, 52), Format::floating(5, 52)}) {
    const Rounder r(f);
    for (int i = 0; i < 200000; ++i) {
      const double x = std::ldexp(mantissa(rng), exponent(rng));
      const double want = round_to(f, x), got = r(x);
      ASSERT_TRUE(want == got || (std::isnan(want) && std::isnan(got)))
          << f.name() << " x=" << x << " round_to=" << want << " rounder=" << got;
    }
  }
}

}  // namespace
}  // namespace pasa
