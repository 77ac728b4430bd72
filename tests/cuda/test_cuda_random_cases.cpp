// SPDX-License-Identifier: Apache-2.0
// Drawn cases for every prefill policy with a GPU kernel (exact, pasa, pasa_accurate, pasa_fp16acc, sage8,
// sage_fp8) and the decode one (fdpp), on each CUDA path, against the emulator by cuda_case_harness.h's rule. The
// curated tests hold the shapes someone thought of; these draw the rest from the places where the
// kernels change behaviour: lengths at the edges of their tiles (64-, 128- and 192-row query tiles,
// 128-key blocks, the decode kernel's 64-key tiles and 16-row limit), GQA groups, both layouts and
// alignments, causal with S_q on either side of S_kv, and for exact the sliding windows, softcaps and
// attention masks; inputs uniform on ranges that include a common offset (all of Q and K positive, the
// large-mean case PASA shifts away) and wide values. The draws come from fixed seeds, so a failure replays (SCOPED_TRACE prints the case
// and its data seed); PASA_RANDOM_CASES_SEED draws another set for a longer soak.
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda/host/decode_params.h"
#include "cuda_case_harness.h"

namespace pasa {
namespace {

// What a policy's kernels take beyond the shape (the dispatch refuses the rest, as tested elsewhere).
struct PolicyScope {
  const char* name;
  std::vector<std::int64_t> head_dims;
  bool hopper_only = false;   // pasa_fp16acc, sage8, sage_fp8: the sm_90a kernel only
  bool decode_only = false;   // fdpp: S_q <= 16
  bool score_mods = false;    // windows, softcaps, attention masks
  bool decode_kernel = false; // exact, fdpp: S_q <= 16 runs on the split-KV decode kernel
};

std::uint64_t master_seed() {
  const char* env = std::getenv("PASA_RANDOM_CASES_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 18;
}

// A length near one of the kernels' edges, or anywhere up to 600.
std::int64_t draw_length(std::mt19937_64& rng) {
  static const std::int64_t edges[] = {1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 384, 385};
  if (test::uniform(rng, 0.0, 1.0) < 0.6) return edges[rng() % std::size(edges)];
  return 1 + static_cast<std::int64_t>(rng() % 600);
}

Case draw_case(const PolicyScope& scope, std::mt19937_64& rng) {
  Case c{};
  c.D = scope.head_dims[rng() % scope.head_dims.size()];
  c.Hkv = 1 + static_cast<std::int64_t>(rng() % 2);
  static const std::int64_t groups[] = {1, 2, 3, 4};
  c.Hq = c.Hkv * groups[rng() % std::size(groups)];
  c.B = 1 + static_cast<std::int64_t>(rng() % 2);
  c.Skv = draw_length(rng);
  c.Sq = scope.decode_only ? 1 + static_cast<std::int64_t>(rng() % 16) : (rng() % 4 == 0 ? c.Skv : draw_length(rng));
  c.causal = rng() % 2 == 0;
  c.alignment = rng() % 2 == 0 ? CausalAlignment::bottom_right : CausalAlignment::top_left;
  c.bshd = rng() % 2 == 0;
  c.in = rng() % 2 == 0 ? DType::f16 : DType::bf16;
  static const DType outs[] = {DType::f16, DType::bf16, DType::f32};
  c.out = outs[rng() % std::size(outs)];
  if (scope.score_mods) {
    if (rng() % 4 == 0) c.window_left = static_cast<std::int64_t>(rng() % 300);
    if (rng() % 5 == 0) c.window_right = static_cast<std::int64_t>(rng() % 100);
    if (rng() % 5 == 0) c.softcap = test::uniform(rng, 2.0, 30.0);
    static const CaseMask masks[] = {CaseMask::boolean, CaseMask::add_f32, CaseMask::add_f16, CaseMask::add_bf16};
    if (rng() % 5 == 0) c.mask = masks[rng() % std::size(masks)];
  }
  return c;
}

Policy policy_for(const PolicyScope& scope, DType in) {
  return std::string(scope.name) == "exact" ? exact_policy(in) : preset_policy(scope.name);
}

class CudaRandomCases : public OnEachCudaPath {};
INSTANTIATE_TEST_SUITE_P(Paths, CudaRandomCases, ::testing::Values(CudaPath::automatic, CudaPath::portable),
                         path_param_name);

void run_drawn_cases(const PolicyScope& scope, int count) {
  if (scope.hopper_only && (g_cuda_path == CudaPath::portable || !have_hopper_path())) {
    GTEST_SKIP() << scope.name << " runs on the sm_90a path only";
  }
  const std::uint64_t seed = master_seed() ^ std::hash<std::string>{}(scope.name) ^
                             (g_cuda_path == CudaPath::portable ? 0x9e3779b97f4a7c15ull : 0);
  std::mt19937_64 rng(seed);
  struct Range {
    double lo, hi;
    const char* name;
  };
  static const Range ranges[] = {{-1.0, 1.0, "uniform(-1,1)"},
                                 {-4.0, 4.0, "uniform(-4,4)"},
                                 {0.0, 3.0, "uniform(0,3)"},
                                 {-0.05, 0.05, "uniform(-0.05,0.05)"}};
  for (int i = 0; i < count; ++i) {
    const Case c = draw_case(scope, rng);
    // The split-KV decode kernel (exact and fdpp at S_q <= 16) partitions the keys its own way: each
    // of a CTA's four warps keeps a running max over its quarter of every tile, and the splits are
    // chosen for the GPU, where the emulator takes 128-key blocks (and fdpp recomputes whole CTAs,
    // where the emulator recomputes rows). On a peaked softmax (the wide ranges) a few P carry the
    // output, so which of them are exactly 1 moves either error by a factor of 3-50, and the
    // two-sided rule does not apply: there, the flat ranges only.
    const bool decode_kernel = scope.decode_kernel && c.Sq <= cuda::kDecodeMaxSeqQ;
    const Range& r = decode_kernel ? ranges[rng() % 2 == 0 ? 0 : 3] : ranges[rng() % std::size(ranges)];
    const std::uint64_t data_seed = rng();
    const Policy policy = policy_for(scope, c.in);
    check_case(c, policy, policy, std::nullopt, nullptr, data_seed, r.lo, r.hi, nullptr, r.name);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST_P(CudaRandomCases, Exact) {
  run_drawn_cases({.name = "exact", .head_dims = {64, 96, 128, 256}, .score_mods = true, .decode_kernel = true}, 40);
}
TEST_P(CudaRandomCases, Pasa) { run_drawn_cases({.name = "pasa", .head_dims = {64, 96, 128, 256}}, 30); }
TEST_P(CudaRandomCases, PasaAccurate) {
  run_drawn_cases({.name = "pasa_accurate", .head_dims = {64, 96, 128, 256}}, 20);
}
TEST_P(CudaRandomCases, PasaFp16Acc) {
  run_drawn_cases({.name = "pasa_fp16acc", .head_dims = {64, 128}, .hopper_only = true}, 20);
}
TEST_P(CudaRandomCases, Sage8) { run_drawn_cases({.name = "sage8", .head_dims = {64, 128}, .hopper_only = true}, 30); }
TEST_P(CudaRandomCases, SageFp8) {
  run_drawn_cases({.name = "sage_fp8", .head_dims = {64, 128}, .hopper_only = true}, 20);
}
TEST_P(CudaRandomCases, FdppDecode) {
  run_drawn_cases({.name = "fdpp", .head_dims = {64, 128}, .decode_only = true, .decode_kernel = true}, 20);
}

}  // namespace
}  // namespace pasa
