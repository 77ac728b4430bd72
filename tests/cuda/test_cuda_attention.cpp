// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels against the fp64 reference, with the CPU emulator running the same policy as the
// yardstick (cuda_case_harness.h states the rule): awkward shapes, layouts, causal alignments, GQA,
// CUDA graphs, the choice of kernel path and bad input (the decode kernel: test_cuda_decode.cpp). The
// exact and pasa prefill tests run on both paths (automatic, and the portable kernels forced); sage8
// needs the sm_90a path. Without a GPU of compute capability 8.0 or newer every test is skipped.
#include <cstdlib>

#include "attention_checks.h"
#include "cuda/host/decode_params.h"
#include "cuda_case_harness.h"
#include "pasa/attention_plan.h"

namespace pasa {
namespace {

// Awkward shapes: S = 1, 17, 1013, S_q != S_kv both ways, MQA / GQA, fully masked rows, BSHD.
std::vector<Case> awkward_cases(DType in) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  return {
      {1, 1, 1, 1, 1, 64, false, br, false, in, f32},
      {2, 4, 2, 17, 17, 64, true, br, false, in, in},
      {1, 2, 1, 1013, 1013, 128, true, br, false, in, f32},
      {1, 2, 2, 1013, 1013, 64, true, tl, true, in, f16},
      {1, 3, 1, 17, 300, 128, true, br, true, in, bf16},   // S_q < S_kv, MQA, BSHD
      {1, 3, 3, 300, 17, 64, true, tl, false, in, f32},    // S_q > S_kv
      {1, 2, 2, 300, 17, 128, true, br, false, in, f32},   // S_q > S_kv: fully masked rows
      {2, 2, 1, 257, 513, 128, false, br, true, in, in},   // GQA, BSHD, tails
      {1, 1, 1, 1, 1013, 128, true, br, false, in, f32},   // decode-like
      {1, 2, 1, 700, 700, 64, false, br, false, in, f32},
  };
}

class CudaExact : public OnEachCudaPath {};
INSTANTIATE_TEST_SUITE_P(Paths, CudaExact, ::testing::Values(CudaPath::automatic, CudaPath::portable),
                         path_param_name);

TEST_P(CudaExact, MatchesReferenceFp16) {
  for (const Case& c : awkward_cases(DType::f16)) check_case(c, exact_policy(DType::f16));
}

TEST_P(CudaExact, MatchesReferenceBf16) {
  for (const Case& c : awkward_cases(DType::bf16)) check_case(c, exact_policy(DType::bf16));
}

// pasa on both paths: the sm_90a kernel where the automatic path has it, the portable one forced.
class CudaPasa : public OnEachCudaPath {};
INSTANTIATE_TEST_SUITE_P(Paths, CudaPasa, ::testing::Values(CudaPath::automatic, CudaPath::portable),
                         path_param_name);

TEST_P(CudaPasa, MatchesReferenceFp16) {
  for (const Case& c : awkward_cases(DType::f16)) check_case(c, pasa_policy());
}

TEST_P(CudaPasa, MatchesReferenceBf16Inputs) {
  for (const Case& c : awkward_cases(DType::bf16)) check_case(c, pasa_policy());
}

TEST_P(CudaPasa, BetaZeroIsAccurate) {
  Policy p = pasa_policy();
  p.beta = 0.0;
  check_case({1, 2, 1, 300, 300, 128, true, CausalAlignment::bottom_right, false, DType::f16, DType::f32}, p);
}

// The exact kernel takes the row max on raw scores and scales inside the exponent: it flips Q for a
// negative scale and runs a zero scale as a tiny positive one. Both must still match the reference.
TEST_P(CudaExact, NegativeZeroAndLargeScales) {
  const auto br = CausalAlignment::bottom_right;
  for (const double scale : {-0.2, 0.0, 1.5}) {
    check_case({1, 2, 1, 300, 300, 128, true, br, false, DType::f16, DType::f32}, exact_policy(DType::f16),
               exact_policy(DType::f16), scale);
    check_case({1, 2, 2, 257, 700, 64, false, br, true, DType::bf16, DType::bf16}, exact_policy(DType::bf16),
               exact_policy(DType::bf16), scale);
  }
}

// Many key blocks through both pipeline stages, many query blocks, tails on both sides.
TEST_P(CudaExact, LongSequences) {
  const auto br = CausalAlignment::bottom_right;
  check_case({1, 2, 1, 1500, 1500, 128, true, br, false, DType::f16, DType::f16}, exact_policy(DType::f16));
  check_case({1, 2, 2, 1100, 1600, 64, false, br, false, DType::bf16, DType::bf16}, exact_policy(DType::bf16));
}

// More (query block, head) tiles than the GPU has SMs, so that the persistent exact kernel runs
// several tiles per CTA and its K / V ring carries its phases across them: causal tiles of different
// lengths, tiles whose rows see no key (S_q > S_kv, bottom-right) between others, GQA, BSHD.
TEST_P(CudaExact, PersistentTilesOfMixedLengths) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  check_case({2, 40, 8, 300, 100, 64, true, br, false, DType::f16, DType::f32}, exact_policy(DType::f16));
  check_case({2, 36, 36, 260, 700, 128, true, tl, true, DType::bf16, DType::bf16}, exact_policy(DType::bf16));
  check_case({1, 140, 4, 70, 390, 64, false, br, false, DType::f16, DType::f16}, exact_policy(DType::f16));
}

// Sliding windows (one side, both sides; causal or not; an upper bound alone, which the sm_90a
// kernels without score modifiers run; both alignments; S_q != S_kv; the tile's
// first key blocks skipped) and the logit softcap (at scale 1 on wide scores, where tanh bends) on
// both exact kernels (the sm_90a one at D 64 and 128; the portable one on its path, at D 96 and 256
// and for a negative scale, whose Q it flips), against the emulator running the same. A decode shape
// with a window runs there too (the decode kernel has no window).
TEST_P(CudaExact, SlidingWindowAndSoftcap) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const DType f16 = DType::f16, bf16 = DType::bf16, f32 = DType::f32;
  const Case cases[] = {
      {1, 4, 2, 700, 700, 128, true, br, false, f16, f16, 100, -1, 0.0},      // Mistral-style causal window
      {2, 2, 1, 300, 900, 64, false, tl, true, bf16, bf16, 150, 40, 0.0},     // two-sided, S_q < S_kv
      {1, 2, 2, 900, 300, 128, false, br, false, f16, f32, 20, 70, 0.0},      // S_q > S_kv, rows outside
      {1, 2, 1, 500, 700, 64, false, tl, false, bf16, f32, -1, 50, 0.0},      // upper bound alone
      {1, 2, 1, 1100, 1100, 64, true, br, false, bf16, bf16, 255, -1, 5.0},   // window + softcap
      {1, 2, 1, 1, 1000, 128, true, br, false, f16, f16, 200, -1, 0.0},       // decode shape
      {1, 2, 1, 600, 600, 96, true, tl, false, bf16, bf16, 64, -1, 0.0},      // D 96
      {1, 2, 2, 300, 700, 256, false, br, true, f16, f16, 90, 30, 4.0},       // D 256, window + softcap
  };
  for (const Case& c : cases) check_case(c, exact_policy(c.in));
  for (const Case& c : {Case{1, 2, 2, 500, 500, 128, true, br, false, f16, f32, -1, -1, 5.0},
                        Case{1, 3, 1, 257, 513, 64, false, tl, true, bf16, bf16, -1, -1, 3.0},
                        Case{1, 2, 1, 300, 300, 256, true, br, false, f16, f16, -1, -1, 3.0}}) {
    check_case(c, exact_policy(c.in), exact_policy(c.in), 1.0);  // wide scores: tanh saturates
  }
  check_case({1, 2, 1, 400, 400, 64, true, br, false, f16, f32, 70, -1, 3.0}, exact_policy(f16),
             exact_policy(f16), -1.0);  // negative scale: the softcap of the sign-flipped scores
}

// Attention masks (boolean and additive f32 / f16 / bf16, each with another broadcast: harness
// CaseMask) on both exact kernels and every head dim, alone and with causal masks, windows and
// softcaps, against the emulator running the same. Boolean masks hide every key of a row (O = 0,
// LSE = -inf there).
TEST_P(CudaExact, AttentionMasks) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const DType f16 = DType::f16, bf16 = DType::bf16, f32 = DType::f32;
  using M = CaseMask;
  const Case cases[] = {
      {2, 2, 1, 300, 300, 64, false, br, false, f16, f16, -1, -1, 0.0, M::boolean},
      {1, 4, 2, 200, 500, 128, true, br, true, bf16, f32, -1, -1, 0.0, M::add_f32},
      {2, 2, 2, 17, 260, 96, false, tl, false, f16, f16, -1, -1, 0.0, M::add_f16},
      {2, 2, 1, 150, 333, 256, true, tl, false, bf16, bf16, -1, -1, 0.0, M::add_bf16},  // padding
      {1, 2, 1, 700, 700, 64, true, br, false, bf16, bf16, 120, -1, 5.0, M::add_bf16},  // all three
      {1, 2, 2, 400, 400, 128, false, br, false, f16, f16, 60, 60, 0.0, M::boolean},
      {1, 2, 1, 300, 300, 256, false, br, false, f16, f32, -1, -1, 4.0, M::add_f16},
      {1, 4, 1, 1, 700, 128, true, br, false, f16, f16, -1, -1, 0.0, M::add_bf16},      // decode shape
  };
  for (const Case& c : cases) check_case(c, exact_policy(c.in));
  for (const double scale : {-0.2, 0.0}) {  // Q flipped; a zero scale (the mask alone decides)
    check_case({1, 2, 1, 260, 300, 64, true, br, false, f16, f32, -1, -1, 0.0, M::add_f32}, exact_policy(f16),
               exact_policy(f16), scale);
  }
}

// The same for the pasa kernels (the sm_90a one: two warpgroups of 64 rows a CTA on the persistent
// engine; the portable one: many CTAs of 128 rows).
// (On the sm_90a path the bf16 cases run the prepass as a kernel of their own, which rounds V to fp16
// for the attention kernel: each key block serves 3 and 2 query tiles, below the launcher's rule
// (pasa_hopper_launch.cuh); K' and V fills carried across tiles and around the ring.)
TEST_P(CudaPasa, PersistentTilesOfMixedLengths) {
  const auto br = CausalAlignment::bottom_right;
  check_case({2, 36, 12, 130, 300, 64, true, br, false, DType::bf16, DType::f16}, pasa_policy());
  check_case({1, 140, 4, 70, 200, 128, false, br, true, DType::f16, DType::f32}, pasa_policy());
  check_case({2, 40, 40, 200, 450, 128, false, br, true, DType::bf16, DType::bf16}, pasa_policy());
}

// (On the sm_90a path these run the prepass inside the attention kernel: each key block serves 32, 9
// and 18 query tiles (GQA groups times query blocks, causal calls counted half), at or above the
// launcher's rule for their dtype and head dim, pasa_hopper_launch.cuh.)
TEST_P(CudaPasa, LongSequences) {
  const auto br = CausalAlignment::bottom_right;
  check_case({1, 8, 1, 1000, 1000, 128, true, br, false, DType::f16, DType::f16}, pasa_policy());
  check_case({1, 2, 2, 1100, 1600, 64, false, br, false, DType::bf16, DType::f16}, pasa_policy());
  check_case({1, 4, 1, 1100, 1100, 128, true, br, true, DType::bf16, DType::bf16}, pasa_policy());
}

// The default policy (exact: input and p fp32) runs as exact with P in the input dtype.
TEST_P(CudaExact, DefaultPolicyRunsAsInputDtypeP) {
  check_case({1, 2, 2, 129, 200, 64, true, CausalAlignment::top_left, false, DType::f16, DType::f32},
             Policy{}, exact_policy(DType::f16));
}

// The inputs on which a fully-fp16 attention without the shift overflows: the PASA paper's Table 4
// (uniform and hybrid Q, K, V at (1, 2, 1280, 128), fp16; FA(FP16-FP32) turns 0.04-100% of its
// output into NaN; the x0 = 30 cases also at head dim 64, causal) and the resonance inputs
// (tests/cpu/test_pasa.cpp shows the overflow without the shift), GQA, MQA and causal among them. The pasa kernel must stay finite and as accurate as its emulator.
TEST_P(CudaPasa, PaperTable4AndResonanceInputs) {
  const auto br = CausalAlignment::bottom_right;
  const Policy pol = pasa_policy();
  struct Table4 {
    bool hybrid;
    double x0, am;
  };
  const Table4 table4[] = {{false, 30, 0.5}, {false, 20, 15}, {false, 20, 20},
                           {true, 30, 10},   {true, 20, 50},  {true, 20, 100}};
  for (int i = 0; i < 6; ++i) {
    const Table4 t = table4[i];
    // The paper's shape with `pasa study`'s seed for the case (the numbers docs/numerics.md compares
    // with the study's), and at head dim 64, causal, for the x0 = 30 cases.
    const std::uint64_t seed = 2024 + 1000003ull * i;
    for (const bool d64 : {false, true}) {
      if (d64 && t.x0 != 30) continue;
      const Case c{1, 2, 2, 1280, 1280, d64 ? 64 : 128, d64, br, false, DType::f16, DType::f16};
      const Shape4 shape{c.B, c.Hq, c.Sq, c.D};
      const QKV data = t.hybrid ? hybrid_qkv(shape, t.x0, t.am, seed) : uniform_qkv(shape, t.x0, t.am, seed);
      GivenInputs in{data.q, data.k, data.v};
      const std::string name = std::string(t.hybrid ? "hybrid" : "uniform") + " x0 " + std::to_string(t.x0) +
                               " Am " + std::to_string(t.am);
      check_case(c, pol, pol, std::nullopt, nullptr, seed, -1.0, 1.0, &in, name.c_str());
    }
  }
  for (const char* preset : {"qwen2", "svd"}) {
    for (const Case& c : {Case{1, 4, 2, 256, 256, 128, true, br, false, DType::f16, DType::f16},
                          Case{1, 2, 2, 300, 300, 128, false, br, false, DType::bf16, DType::f32},
                          Case{1, 2, 1, 333, 333, 64, true, br, false, DType::f16, DType::f32}}) {
      const std::uint64_t seed = 7 + c.Sq;
      const ResonanceParams params = resonance_preset(preset);
      const QKV qs = resonance_qkv({c.B, c.Hq, c.Sq, c.D}, params, seed, c.in);
      const QKV kv = resonance_qkv({c.B, c.Hkv, c.Skv, c.D}, params, seed, c.in);
      GivenInputs in{qs.q, kv.k, kv.v};
      const std::string name = std::string("resonance ") + preset;
      check_case(c, pol, pol, std::nullopt, nullptr, seed, -1.0, 1.0, &in, name.c_str());
    }
  }
}

// ----------------------------------------------------------------------------------------------
// CUDA graphs: every scratch buffer is stream-ordered from pasa's pool, so a call can be captured
// (pasa: K' scratch; decode: the split workspace) and replayed with the same result.

TEST(CudaGraph, PrefillDecodeAndPortableCallsAreCapturable) {
  REQUIRE_GPU();
  const auto br = CausalAlignment::bottom_right;
  struct Item {
    Case c;
    Policy policy;
    CudaPath path;
  };
  Policy split3 = exact_policy(DType::f16);
  split3.splits = 3;
  std::vector<Item> items = {
      {{2, 32, 8, 1, 2000, 128, false, br, false, DType::f16, DType::f16}, split3, CudaPath::automatic},
      {{1, 4, 2, 300, 300, 96, true, br, false, DType::f16, DType::f16}, exact_policy(DType::f16),
       CudaPath::portable},
      {{1, 4, 2, 300, 300, 128, true, br, false, DType::bf16, DType::f16}, pasa_policy(), CudaPath::portable}};
  if (have_hopper_path()) {
    items.push_back(
        {{1, 4, 2, 300, 300, 128, true, br, false, DType::f16, DType::f16}, pasa_policy(), CudaPath::automatic});
    items.push_back({{2, 8, 2, 700, 700, 64, true, br, false, DType::bf16, DType::bf16}, exact_policy(DType::bf16),
                     CudaPath::automatic});
  }
  for (const Item& it : items) {
    const Case& c = it.c;
    SCOPED_TRACE(describe(c) + " " + to_string(it.policy));
    std::mt19937_64 rng(test::fresh_seed());
    Tensor4 q = test::random_tensor(c.B, c.Hq, c.Sq, c.D, rng, c.in);
    Tensor4 k = test::random_tensor(c.B, c.Hkv, c.Skv, c.D, rng, c.in);
    Tensor4 v = test::random_tensor(c.B, c.Hkv, c.Skv, c.D, rng, c.in);
    Tensor4 o1 = test::make_tensor(c.B, c.Hq, c.Sq, c.D, c.out), o2 = o1;
    DeviceTensor dq(q), dk(k), dv(v), d_o(o1);
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
    AttentionArgs args;
    args.q = dq.view;
    args.k = dk.view;
    args.v = dv.view;
    args.o = d_o.view;
    args.causal = c.causal;
    args.policy = it.policy;
    args.backend = Backend::cuda;
    args.cuda_path = it.path;
    args.stream = stream;
    d_o.poison();
    attention(args);
    cuda_ok(cudaStreamSynchronize(stream), "direct call");
    d_o.copy_to(o1);

    d_o.poison();
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    attention(args);
    cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (int i = 0; i < 2; ++i) cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "graph replay");
    d_o.copy_to(o2);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    EXPECT_EQ(std::memcmp(o1.bytes.data(), o2.bytes.data(), o1.bytes.size()), 0)
        << "graph replay differs from the direct call";
  }
}

// ----------------------------------------------------------------------------------------------
// Bad input: a pasa::Error naming the argument, before any launch.

struct DeviceProblem {
  DeviceBuffer q, k, v, o;
  AttentionArgs args;
  explicit DeviceProblem(std::int64_t D = 64, std::int64_t S = 32, DType dtype = DType::f16)
      : q(S * D * 8 + 64), k(S * D * 8 + 64), v(S * D * 8 + 64), o(S * D * 8 + 64) {
    args.q = bhsd_view(q.ptr, dtype, 1, 1, S, D, Device::cuda);
    args.k = bhsd_view(k.ptr, dtype, 1, 1, S, D, Device::cuda);
    args.v = bhsd_view(v.ptr, dtype, 1, 1, S, D, Device::cuda);
    args.o = bhsd_view(o.ptr, dtype, 1, 1, S, D, Device::cuda);
    args.policy = exact_policy(dtype == DType::bf16 ? DType::bf16 : DType::f16);
  }
};

TEST(CudaBadInput, HeadDimOutsideTheSupportedSet) {
  REQUIRE_GPU();
  DeviceProblem p(80);
  test::expect_error([&] { attention(p.args); }, "head dim 80");
  test::expect_error([&] { attention(p.args); }, "64, 96, 128 or 256");
}

// ----------------------------------------------------------------------------------------------
// Head dims 96 and 256: the portable exact kernel on every GPU (the sm_90a kernels take 64 and 128)
// and the decode kernel, against the emulator.

std::vector<Case> head_dim_cases(DType in, std::int64_t D) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const DType f32 = DType::f32;
  return {
      {1, 2, 1, 1, 1, D, false, br, false, in, f32},          // one key
      {2, 4, 2, 17, 17, D, true, br, false, in, in},          // GQA, tails
      {1, 2, 2, 300, 17, D, true, br, false, in, f32},        // S_q > S_kv: fully masked rows
      {1, 3, 1, 257, 700, D, true, tl, true, in, DType::bf16},  // MQA, BSHD, top-left
      {1, 2, 2, 1013, 1013, D, false, br, false, in, in},     // many key blocks
      {1, 32, 8, 4, 1000, D, true, br, false, in, f32},       // a decode shape (the decode kernel)
  };
}

TEST_P(CudaExact, HeadDims96And256) {
  for (const std::int64_t D : {96, 256}) {
    for (const DType in : {DType::f16, DType::bf16}) {
      for (const Case& c : head_dim_cases(in, D)) check_case(c, exact_policy(in));
    }
    const auto br = CausalAlignment::bottom_right;
    check_case({1, 2, 1, 300, 300, D, true, br, false, DType::f16, DType::f32}, exact_policy(DType::f16),
               exact_policy(DType::f16), -0.2);  // a negative scale flips Q
  }
}

// The problem as a plan sees it: the kernel and path a plan of `args` chooses.
CudaPlanChoice choice_of(const AttentionArgs& args) {
  const ProblemShape shape = check_attention_args(args);
  const std::shared_ptr<const CudaPlan> plan = plan_cuda_attention(args, shape);
  return cuda_plan_choice(*plan);
}

// Decode shapes take the decode kernel at every head dim where the device grants its shared memory,
// the compact tile's included (head dim 256: 136 KiB, which A100 and H100 / H200 grant; head dim 128
// on 99 KiB devices: the compact tile); elsewhere exact takes the prefill kernel and fdpp is refused
// naming the shared memory.
TEST(CudaHeadDims, DecodeShapesTakeTheDecodeKernelAtEveryHeadDim) {
  REQUIRE_GPU();
  for (const std::int64_t D : {64, 96, 128, 256}) {
    DeviceProblem p(D, 4);  // S_q = 4: one m-tile
    const int dim = static_cast<int>(D);
    const bool fits =
        device_grants_shared_memory(cuda::decode_tile_for(dim, 1, granted_shared_memory()).smem_bytes(1));
    EXPECT_STREQ(choice_of(p.args).kernel, fits ? "decode (split-KV)" : "exact (portable)") << "head dim " << D;
    if (!fits) {
      p.args.policy = preset_policy("fdpp");
      test::expect_error([&] { attention(p.args); }, "bytes of shared memory per CTA");
    }
  }
}

// ----------------------------------------------------------------------------------------------
// The kernel path: what a plan reports, forcing the portable path, and what it refuses.

TEST(CudaPathChoice, PlanReportsItsPath) {
  REQUIRE_GPU();
  DeviceProblem p(128, 256);
  const CudaPlanChoice automatic = choice_of(p.args);
  if (have_hopper_path()) {
    EXPECT_EQ(automatic.path, CudaKernelPath::hopper);
    EXPECT_STREQ(automatic.kernel, "exact (sm_90a)");
  } else {
    EXPECT_EQ(automatic.path, CudaKernelPath::portable);
    EXPECT_STREQ(automatic.kernel, "exact (portable)");
  }
  p.args.cuda_path = CudaPath::portable;
  const CudaPlanChoice forced = choice_of(p.args);
  EXPECT_EQ(forced.path, CudaKernelPath::portable);
  EXPECT_STREQ(forced.kernel, "exact (portable)");
  // The decode kernel serves both paths.
  DeviceProblem d(64, 1);
  d.args.cuda_path = CudaPath::portable;
  EXPECT_EQ(choice_of(d.args).path, CudaKernelPath::portable);
  EXPECT_STREQ(choice_of(d.args).kernel, "decode (split-KV)");
}

// PASA_CUDA_PATH=portable (read once per process; ctest runs a subset with it set) forces the portable
// path for automatic calls.
TEST(CudaPathChoice, EnvironmentVariableForcesThePortablePath) {
  REQUIRE_GPU();
  const char* env = std::getenv("PASA_CUDA_PATH");
  if (env == nullptr || std::string(env) != "portable") GTEST_SKIP() << "PASA_CUDA_PATH=portable not set";
  DeviceProblem p(128, 256);
  EXPECT_EQ(choice_of(p.args).path, CudaKernelPath::portable);
  EXPECT_FALSE(have_hopper_path());
}

// pasa runs on both paths (the sm_90a kernel where the automatic path has it); sage8 needs sm_90a.
TEST(CudaPathChoice, PasaRunsOnBothPathsSage8NeedsTheHopperPath) {
  REQUIRE_GPU();
  for (const char* preset : {"pasa", "pasa_accurate"}) {
    DeviceProblem p(128, 256);
    p.args.policy = preset_policy(preset);
    EXPECT_STREQ(choice_of(p.args).kernel, have_hopper_path() ? "pasa (sm_90a)" : "pasa (portable)");
    p.args.cuda_path = CudaPath::portable;
    EXPECT_EQ(choice_of(p.args).path, CudaKernelPath::portable);
    EXPECT_STREQ(choice_of(p.args).kernel, "pasa (portable)");
  }
  DeviceProblem p(128, 256);
  p.args.policy = preset_policy("sage8");
  p.args.cuda_path = CudaPath::portable;
  test::expect_error([&] { attention(p.args); }, "policy 'sage8'");
  test::expect_error([&] { attention(p.args); }, "needs sm_90a");
  test::expect_error([&] { attention(p.args); }, "supports exact, pasa and fdpp");
  test::expect_error([&] { attention(p.args); }, "CUDA device");
  if (!have_hopper_path()) {
    p.args.cuda_path = CudaPath::automatic;
    test::expect_error([&] { attention(p.args); }, "needs sm_90a");
  }
  // Head dim 96: pasa takes the portable kernel on either path; sage8 has none, and the sm_90a
  // kernel's refusal names the head dim.
  DeviceProblem d96(96, 256);
  d96.args.policy = pasa_policy();
  EXPECT_STREQ(choice_of(d96.args).kernel, "pasa (portable)");
  if (have_hopper_path()) {
    d96.args.policy = preset_policy("sage8");
    test::expect_error([&] { attention(d96.args); }, "head dim 96 (it takes 64 or 128)");
  }
}

TEST(CudaPathChoice, PlanRunRefusesAnotherPath) {
  REQUIRE_GPU();
  DeviceProblem p(64, 32);
  const AttentionPlan plan(p.args);
  AttentionArgs forced = p.args;
  forced.cuda_path = CudaPath::portable;
  test::expect_error([&] { plan.run(forced); }, "cuda_path: differs from the problem the plan was made for");
}

TEST(CudaBadInput, HostPointers) {
  REQUIRE_GPU();
  DeviceProblem p;
  std::vector<std::uint16_t> host(32 * 64);
  p.args.k.data = host.data();  // claims Device::cuda, is host memory
  test::expect_error([&] { attention(p.args); }, "k: pointer is host memory");
}

TEST(CudaBadInput, MisalignedPointer) {
  REQUIRE_GPU();
  DeviceProblem p;
  p.args.q.data = static_cast<std::uint16_t*>(p.q.ptr) + 1;
  test::expect_error([&] { attention(p.args); }, "q: data pointer is not 16-byte aligned");
}

TEST(CudaBadInput, HeadDimStrideNotOne) {
  REQUIRE_GPU();
  DeviceProblem p;
  p.args.v.stride = {2 * 32 * 64, 2 * 32 * 64, 2 * 64, 2};
  test::expect_error([&] { attention(p.args); }, "v: head-dim stride is 2");
}

TEST(CudaBadInput, UnsupportedPolicyDtypeAndBlock) {
  REQUIRE_GPU();
  DeviceProblem p;
  p.args.policy = preset_policy("fa16_fp32");  // (fdpp's formats, synchronized: decode only)
  test::expect_error([&] { attention(p.args); }, "run on the CUDA decode path only");
  p.args.policy = parse_policy("pasa,s2=64");
  test::expect_error([&] { attention(p.args); }, "policy field 's2'");
  p.args.policy = parse_policy("pasa,o=fp32");
  test::expect_error([&] { attention(p.args); }, "policy field 'o'");
  p.args.policy = parse_policy("pasa,reference=average");  // (Algorithm 1's fp16 reference: the emulator's)
  test::expect_error([&] { attention(p.args); }, "policy field 'reference'");
  DeviceProblem f(64, 32, DType::f32);
  f.args.policy = Policy{};
  test::expect_error([&] { attention(f.args); }, "q: dtype f32");
  DeviceProblem b(64, 32, DType::bf16);
  b.args.policy = exact_policy(DType::f16);
  test::expect_error([&] { attention(b.args); }, "policy field 'input'");
}

// A beta (or a folded scale) whose shifting matrix M, rounded to fp16, has rows summing to 0 or
// below: the kernels would return NaN (G infinite) or apply a beta above 1; refused before any launch,
// as the emulator refuses it.
TEST(CudaBadInput, PasaShiftThatRoundsSingularIsRefused) {
  REQUIRE_GPU();
  DeviceProblem d64(64, 32), d128(128, 32);
  d64.args.policy = parse_policy("pasa_accurate,beta=0.99999");
  test::expect_error([&] { attention(d64.args); }, "beta: 0.99999 with s2 = 128");
  d128.args.policy = parse_policy("pasa,beta=0.99999");
  test::expect_error([&] { attention(d128.args); }, "M applies a beta above 1");
  d64.args.policy = pasa_policy();
  d64.args.scale = 1e-8;  // (below fp16's smallest normal: the scale's own check refuses it first)
  test::expect_error([&] { attention(d64.args); }, "scale: 1e-08 is below");
  d64.args.scale = std::nullopt;
  attention(d64.args);  // the preset runs
  cuda_ok(cudaDeviceSynchronize(), "pasa preset");
}

// fdpp policies: decode shapes only, and only the preset's formats.
TEST(CudaBadInput, FdppOutsideDecodeOrWithOtherFormats) {
  REQUIRE_GPU();
  DeviceProblem p(64, 32);  // S_q = 32
  p.args.policy = preset_policy("fdpp");
  test::expect_error([&] { attention(p.args); }, "decode path only");
  DeviceProblem d(64, 16);
  d.args.policy = parse_policy("fdpp,p=fp32");
  test::expect_error([&] { attention(d.args); }, "policy fields 'p=fp32'");
}

// ----------------------------------------------------------------------------------------------
// The sage8 kernel (SageAttention2's 8-bit Q, K / FP8 P, V) with each of its Q K^T codes: the sage8
// preset (INT8) and sage_fp8 (e4m3), against the emulator running the preset.
class CudaSage8 : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { REQUIRE_HOPPER_PATH(); }
  Policy policy() const { return preset_policy(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(Presets, CudaSage8, ::testing::Values("sage8", "sage_fp8"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

TEST_P(CudaSage8, MatchesReferenceFp16) {
  for (const Case& c : awkward_cases(DType::f16)) check_case(c, policy());
}

TEST_P(CudaSage8, MatchesReferenceBf16) {
  for (const Case& c : awkward_cases(DType::bf16)) check_case(c, policy());
}

// A small case for the sanitizers (scripts/device_run.sh).
TEST_P(CudaSage8, Small) {
  const auto br = CausalAlignment::bottom_right;
  check_case({1, 2, 1, 130, 200, 64, true, br, false, DType::f16, DType::f16}, policy());
  check_case({1, 2, 2, 70, 65, 128, false, br, false, DType::bf16, DType::f32}, policy());
}

// A [B, H, S, D] tensor of c's input type: normal(0, 1) draws times `magnitude`, a share `zeros` of
// them exactly 0.
HostTensor normal_tensor(const Case& c, std::int64_t H, std::int64_t S, std::mt19937_64& rng,
                         double magnitude = 1.0, double zeros = 0.0) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<float> x(static_cast<std::size_t>(c.B * H * S * c.D));
  for (float& e : x) {
    e = zeros > 0.0 && uniform(rng) < zeros ? 0.0f : static_cast<float>(normal(rng) * magnitude);
  }
  return from_float(x, {c.B, H, S, c.D}, c.in);
}

// The prepass's two forms (sage8_prepare.cu) on either side of the clustered form's limit on an
// H100 / H200, a CTA's rows in 160 KiB: 5 key blocks of 128 keys at D 128 (5120 keys clustered, 5121
// in passes), 10 at D 64; heads whose last CTA holds a partial block with V's rows in K's place (1100
// keys at D 128: 5 CTAs of 2 blocks) and apart from them (900 keys at D 128: 8 CTAs of 1 block; 1900
// at D 64: 8 CTAs of 2). Inputs on which both statistics matter: Q and K with SageAttention2's channel outliers (a
// K mean taken over one CTA's keys alone would shift its blocks' scores against the others'), and V
// growing along the keys (1x to 4x: a scale taken from one CTA's keys alone would misquantize them).
TEST_P(CudaSage8, PrepassClusteredAndInPasses) {
  const auto br = CausalAlignment::bottom_right;
  const Case cases[] = {
      {1, 2, 1, 64, 5120, 128, false, br, false, DType::f16, DType::f32},
      {1, 2, 1, 64, 5121, 128, false, br, false, DType::f16, DType::f32},
      {1, 2, 2, 48, 10240, 64, true, br, false, DType::bf16, DType::f16},
      {1, 2, 2, 48, 10241, 64, true, br, false, DType::bf16, DType::f16},
      {2, 4, 2, 100, 1100, 128, true, br, false, DType::bf16, DType::bf16},
      {2, 4, 2, 100, 900, 128, false, br, false, DType::f16, DType::f16},
      {1, 2, 1, 70, 1900, 64, true, br, false, DType::bf16, DType::f32},
  };
  const Policy pol = policy();
  for (const Case& c : cases) {
    const std::uint64_t seed = test::fresh_seed();
    const QKV qs = outlier_qkv({c.B, c.Hq, c.Sq, c.D}, 4, 20.0, seed, c.in);
    const QKV kv = outlier_qkv({c.B, c.Hkv, c.Skv, c.D}, 4, 20.0, seed, c.in);
    std::vector<float> v = to_float(kv.v);  // [B, H_kv, S_kv, D]
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double key = static_cast<double>(static_cast<std::int64_t>(i) / c.D % c.Skv);
      v[i] = static_cast<float>(v[i] * (1.0 + 3.0 * key / static_cast<double>(c.Skv)));
    }
    GivenInputs given{qs.q, kv.k, from_float(v, {c.B, c.Hkv, c.Skv, c.D}, c.in)};
    check_case(c, pol, pol, std::nullopt, nullptr, seed, -1.0, 1.0, &given, "outliers, V growing along the keys");
  }
}

// bf16 values whose quantization scales have no finite reciprocal in fp32 (a group's or channel's max
// below 127 / FLT_MAX or 448 / FLT_MAX): huge Q over tiny K and tiny V with exact zeros (the prepass's
// quantizers, clustered and in passes: with an infinite reciprocal a value keeps only its sign, and a
// zero becomes NaN); then small Q over huge K, whose column sums overflow fp32 unless scaled, and over
// keys of both signs near bf16's largest, whose K - mean passes fp32's. (Q rows that small are the
// kernel's known limit: docs/numerics.md.)
TEST_P(CudaSage8, ScalesWithoutAFiniteReciprocal) {
  const auto br = CausalAlignment::bottom_right;
  const Case cases[] = {
      {1, 2, 1, 64, 300, 64, false, br, false, DType::bf16, DType::f32},
      {1, 2, 1, 40, 5200, 128, true, br, false, DType::bf16, DType::f32},  // (the prepass in passes)
  };
  struct Magnitudes {
    double q, k, v;
    const char* what;
  };
  const Magnitudes magnitudes[] = {{1e37, 2e-38, 1e-37, "Q 1e37, K 2e-38, V 1e-37 with zeros"},
                                   {1e-36, 1e37, 1.0, "Q 1e-36, K 1e37, V with zeros"}};
  const Policy pol = policy();
  for (const Case& c : cases) {
    for (const Magnitudes& m : magnitudes) {
      const std::uint64_t seed = test::fresh_seed();
      std::mt19937_64 rng(seed);
      GivenInputs given{normal_tensor(c, c.Hq, c.Sq, rng, m.q), normal_tensor(c, c.Hkv, c.Skv, rng, m.k),
                        normal_tensor(c, c.Hkv, c.Skv, rng, m.v, 0.1)};
      check_case(c, pol, pol, std::nullopt, nullptr, seed, -1.0, 1.0, &given, m.what);
    }
    // Keys near bf16's ends, three in four near +2.5e38 and the rest near -2.5e38: K - mean reaches
    // 3.75e38, past fp32, where smooth K's difference must not overflow (the prepass halves it).
    const std::uint64_t seed = test::fresh_seed();
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<float> k(static_cast<std::size_t>(c.B * c.Hkv * c.Skv * c.D));
    for (std::size_t i = 0; i < k.size(); ++i) {
      const std::size_t key = i / static_cast<std::size_t>(c.D);
      k[i] = static_cast<float>((key % 4 == 3 ? -2.5e38 : 2.5e38) + 1e36 * normal(rng));
    }
    GivenInputs given{normal_tensor(c, c.Hq, c.Sq, rng, 1e-36), from_float(k, {c.B, c.Hkv, c.Skv, c.D}, c.in),
                      normal_tensor(c, c.Hkv, c.Skv, rng)};
    check_case(c, pol, pol, std::nullopt, nullptr, seed, -1.0, 1.0, &given, "Q 1e-36, K near +-2.5e38");
  }
}

// More tiles than SMs for the persistent sage8 variant: its four-stage K and V rings and the Q slot
// (freed once each warpgroup has quantized its rows) carry their phases across tiles of mixed
// lengths, causal rows that see no key, GQA, BSHD, LSE.
TEST_P(CudaSage8, PersistentTilesOfMixedLengths) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  check_case({2, 36, 12, 260, 200, 64, true, br, false, DType::bf16, DType::f16}, policy());
  check_case({1, 140, 4, 70, 390, 128, false, br, true, DType::f16, DType::f32}, policy());
  check_case({2, 40, 8, 300, 700, 128, true, tl, true, DType::f16, DType::bf16}, policy());
}

// normal(0, 1) inputs and SageAttention2's channel outliers (pasa::outlier_qkv: a large same-signed
// offset in a few channels of Q and K, which smooth K removes), GQA, causal both alignments.
TEST_P(CudaSage8, NormalAndOutlierInputs) {
  const auto br = CausalAlignment::bottom_right, tl = CausalAlignment::top_left;
  const Case cases[] = {
      {1, 4, 2, 1000, 1000, 128, false, br, false, DType::f16, DType::f32},
      {1, 4, 1, 777, 1100, 64, true, br, false, DType::f16, DType::f16},
      {2, 2, 2, 600, 300, 128, true, tl, false, DType::bf16, DType::bf16},
      {1, 2, 1, 513, 513, 64, false, br, false, DType::bf16, DType::f32},
  };
  const Policy pol = policy();
  for (const Case& c : cases) {
    const std::uint64_t seed = test::fresh_seed();
    std::mt19937_64 rng(seed);
    GivenInputs normal_in{normal_tensor(c, c.Hq, c.Sq, rng), normal_tensor(c, c.Hkv, c.Skv, rng),
                          normal_tensor(c, c.Hkv, c.Skv, rng)};
    check_case(c, pol, pol, std::nullopt, nullptr, seed, -1.0, 1.0, &normal_in, "normal(0,1)");
    // The same seed gives Q's and K's calls the same outlier channels.
    const QKV qs = outlier_qkv({c.B, c.Hq, c.Sq, c.D}, 4, 20.0, seed, c.in);
    const QKV kv = outlier_qkv({c.B, c.Hkv, c.Skv, c.D}, 4, 20.0, seed, c.in);
    GivenInputs outlier_in{qs.q, kv.k, kv.v};
    check_case(c, pol, pol, std::nullopt, nullptr, seed, -1.0, 1.0, &outlier_in, "outliers(4 ch, 20)");
  }
}

// With V constant every output equals it when P V and l weigh each key by the same numbers: the
// kernel's row sums are those of P~ as rounded (rowsum=p, a column of ones in the P~ V GEMM). Row sums
// of the exponentials before their rounding to e4m3 miss V by up to about a percent here.
TEST_P(CudaSage8, RowSumsAreThoseOfRoundedP) {
  for (const int D : {64, 128}) {
    SCOPED_TRACE(::testing::Message() << "D " << D);
    const Case c{1, 2, 2, 300, 700, D, false, CausalAlignment::bottom_right, false, DType::f16, DType::f32};
    const std::uint64_t seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const QKV data = hybrid_qkv({c.B, c.Hq, c.Sq, c.D}, 0.0, 0.0, seed, c.in);
    std::vector<float> constant(static_cast<std::size_t>(c.B * c.Hkv * c.Skv * c.D), 0.75f);
    const QKV kv = hybrid_qkv({c.B, c.Hkv, c.Skv, c.D}, 0.0, 0.0, seed + 1, c.in);
    GivenInputs given{data.q, kv.k, from_float(constant, {c.B, c.Hkv, c.Skv, c.D}, c.in)};
    std::mt19937_64 rng(seed);
    Extra extra;
    const Policy pol = policy();
    run_case(c, pol, pol, rng, -1.0, 1.0, std::nullopt, &extra, &given);
    double worst = 0.0;
    for (const double o : extra.kernel_o) worst = std::max(worst, std::fabs(o / 0.75 - 1.0));
    EXPECT_LE(worst, 1e-3);
  }
}

// A quantized V can carry O past V's largest magnitude by its quantization error, where exact
// attention's cannot: at the output type's largest value O saturates (as the emulator's does) instead
// of rounding to inf. V's channels: two thirds constant at +-the largest value, the rest spread.
TEST_P(CudaSage8, OutputsAtTheOutputTypesLargestValueSaturate) {
  for (const int D : {64, 128}) {
    for (const DType type : {DType::f16, DType::bf16}) {
      const double top = type == DType::f16 ? 65504.0 : 3.3895313892515355e38;
      const Case c{1, 2, 2, 300, 700, D, false, CausalAlignment::bottom_right, false, type, type};
      const std::uint64_t seed = test::fresh_seed();
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<double> spread(-0.5, 0.5);
      std::vector<float> v(static_cast<std::size_t>(c.B * c.Hkv * c.Skv * c.D));
      for (std::size_t i = 0; i < v.size(); ++i) {
        const int ch = static_cast<int>(i % static_cast<std::size_t>(c.D));
        v[i] = static_cast<float>(ch % 3 == 0 ? top : (ch % 3 == 1 ? -top : top * spread(rng)));
      }
      GivenInputs given{normal_tensor(c, c.Hq, c.Sq, rng), normal_tensor(c, c.Hkv, c.Skv, rng),
                        from_float(v, {c.B, c.Hkv, c.Skv, c.D}, c.in)};
      Extra extra;
      const Policy pol = policy();
      check_case(c, pol, pol, std::nullopt, &extra, seed, -1.0, 1.0, &given, "V at +-the largest value");
      std::size_t at_top = 0;
      for (const double o : extra.kernel_o) {
        ASSERT_TRUE(std::isfinite(o));
        at_top += std::fabs(o) == top;
      }
      EXPECT_GT(at_top, 0u);  // (the case reaches the edge)
    }
  }
}

TEST(CudaBadInput, Sage8OtherBlockOrFields) {
  REQUIRE_GPU();
  DeviceProblem p(64, 32);
  p.args.policy = parse_policy("sage8,s2=64");
  test::expect_error([&] { attention(p.args); }, "policy field 's2'");
  p.args.policy = preset_policy("sage4");  // INT4 Q, K: not a CUDA kernel
  test::expect_error([&] { attention(p.args); }, "policy field");
  p.args.policy = parse_policy("sage8,two_level=false");
  test::expect_error([&] { attention(p.args); }, "'two_level=0' are not supported by the CUDA sage8 kernel");
  p.args.policy = parse_policy("sage8,rowsum=e");  // the kernel sums P~ as rounded
  test::expect_error([&] { attention(p.args); }, "'rowsum=e' are not supported by the CUDA sage8 kernel");
}

// A negative softmax scale is an error naming it (the emulator runs it; the kernel takes the score maxima
// before the scale, which must be positive), not a silently uniform average.
TEST(CudaBadInput, Sage8NegativeScale) {
  REQUIRE_HOPPER_PATH();
  DeviceProblem p(64, 32);
  p.args.policy = preset_policy("sage8");
  p.args.scale = -0.2;
  test::expect_error([&] { attention(p.args); }, "a negative softmax scale");
}

TEST(CudaBadInput, HostLseWithDeviceTensors) {
  REQUIRE_GPU();
  DeviceProblem p;
  std::vector<float> lse(32);
  p.args.lse = lse_view(lse.data(), 1, 1, 32);  // Device::cpu
  test::expect_error([&] { attention(p.args); }, "lse");
}

// Only the exact policy's prefill kernels have windows, softcaps and masks: pasa refuses them with the
// reason (on either path: the sm_90a pasa kernel is asked first).
TEST(CudaBadInput, WindowSoftcapAndMaskOutsideTheExactKernels) {
  REQUIRE_GPU();
  DeviceProblem pr(64, 32);
  pr.args.window_left = 8;
  pr.args.policy = pasa_policy();
  test::expect_error([&] { attention(pr.args); }, "has no sliding window, softcap or attention mask");
}

}  // namespace
}  // namespace pasa
