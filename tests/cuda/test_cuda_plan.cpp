// SPDX-License-Identifier: Apache-2.0
// AttentionPlan on the GPU: run() with a caller-owned workspace gives what pasa::attention gives, bit
// for bit (decode with several splits, and the sm_90a prefill kernels' tile counter, so the workspace
// is used); a captured run() replays on the inputs' current contents; the workspace needs no
// initialization. Without a GPU of compute capability 8.0 or newer every test is
// skipped.
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_case_harness.h"
#include "pasa/attention_plan.h"

namespace pasa {
namespace {

Policy exact_fp16(int splits) {
  Policy p = exact_policy(DType::f16);
  p.splits = splits;
  return p;
}

// The arguments of a call on device tensors, the rest at its defaults.
AttentionArgs device_args(const DeviceTensor& q, const DeviceTensor& k, const DeviceTensor& v, const DeviceTensor& o) {
  AttentionArgs args;
  args.q = q.view;
  args.k = k.view;
  args.v = v.view;
  args.o = o.view;
  return args;
}

// `plan.run(args, workspace)` captured on args.stream into a CUDA graph (returned in `graph`) and
// instantiated.
cudaGraphExec_t capture_run(const AttentionPlan& plan, const AttentionArgs& args, void* workspace, cudaGraph_t& graph) {
  const auto stream = static_cast<cudaStream_t>(args.stream);
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  plan.run(args, workspace);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  return exec;
}

struct Shape {
  std::int64_t B, Hq, Hkv, Sq, Skv;
  int splits;
};

TEST(CudaPlan, RunWithACallerWorkspaceEqualsAttentionAndReplaysInAGraph) {
  REQUIRE_GPU();
  const Shape shapes[] = {{3, 32, 8, 1, 1000, 3}, {1, 32, 8, 1, 4096, 1}, {2, 4, 2, 300, 300, 1}};
  for (const Shape& s : shapes) {
    const auto seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " B" << s.B << " Sq" << s.Sq << " Skv" << s.Skv
                                      << " splits " << s.splits);
    std::mt19937_64 rng(seed);
    Tensor4 q = test::random_tensor(s.B, s.Hq, s.Sq, 128, rng, DType::f16);
    Tensor4 q2 = test::random_tensor(s.B, s.Hq, s.Sq, 128, rng, DType::f16);
    Tensor4 k = test::random_tensor(s.B, s.Hkv, s.Skv, 128, rng, DType::f16);
    Tensor4 v = test::random_tensor(s.B, s.Hkv, s.Skv, 128, rng, DType::f16);
    Tensor4 o = test::make_tensor(s.B, s.Hq, s.Sq, 128, DType::f16);
    DeviceTensor dq(q), dk(k), dv(v), d_o(o);
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
    AttentionArgs args = device_args(dq, dk, dv, d_o);
    args.policy = exact_fp16(s.splits);
    args.causal = true;
    args.stream = stream;

    d_o.poison();
    attention(args);
    cuda_ok(cudaStreamSynchronize(stream), "eager call");
    const auto eager = d_o.download();

    const AttentionPlan plan(args);
    if (s.splits > 1) EXPECT_GT(plan.workspace_bytes(), 0u);
    void* workspace = nullptr;
    cuda_ok(cudaMalloc(&workspace, std::max<std::size_t>(plan.workspace_bytes(), 1)), "cudaMalloc");
    d_o.poison();
    plan.run(args, workspace);
    cuda_ok(cudaStreamSynchronize(stream), "plan run");
    EXPECT_EQ(d_o.download(), eager) << "plan.run differs from pasa::attention";

    // Capture run(), then replay it after new queries were written into the same buffer.
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = capture_run(plan, args, workspace, graph);
    dq.upload(q2);
    d_o.poison();
    cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "graph replay");
    const auto replayed = d_o.download();
    d_o.poison();
    attention(args);
    cuda_ok(cudaStreamSynchronize(stream), "eager call on the new queries");
    EXPECT_EQ(replayed, d_o.download()) << "graph replay differs from pasa::attention on the new queries";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(workspace);
    cudaStreamDestroy(stream);
  }
}

// Random fp16 q, k, v (D 128) on the device, an output, and the call's arguments with `policy`.
struct DeviceProblem {
  Tensor4 q, k, v, o;
  DeviceTensor dq, dk, dv, d_o;
  AttentionArgs args;
  DeviceProblem(std::int64_t B, std::int64_t Hq, std::int64_t Hkv, std::int64_t Sq, std::int64_t Skv,
                const char* policy, std::mt19937_64& rng, std::int64_t D = 128)
      : q(test::random_tensor(B, Hq, Sq, D, rng, DType::f16)),
        k(test::random_tensor(B, Hkv, Skv, D, rng, DType::f16)),
        v(test::random_tensor(B, Hkv, Skv, D, rng, DType::f16)),
        o(test::make_tensor(B, Hq, Sq, D, DType::f16)),
        dq(q), dk(k), dv(v), d_o(o),
        args(device_args(dq, dk, dv, d_o)) {
    args.policy = parse_policy(policy);
  }
};

// pasa::attention on `args` into the poisoned output `d_o`, as bytes.
std::vector<std::uint8_t> eager_result(const AttentionArgs& args, DeviceTensor& d_o) {
  d_o.poison();
  attention(args);
  cuda_ok(cudaDeviceSynchronize(), "eager call");
  return d_o.download();
}

// `plan.run(args, workspace)` into the poisoned output `d_o` gives `expected`, bit for bit.
void expect_run_gives(const AttentionPlan& plan, const AttentionArgs& args, void* workspace, DeviceTensor& d_o,
                      const std::vector<std::uint8_t>& expected, const char* what) {
  d_o.poison();
  plan.run(args, workspace);
  cuda_ok(cudaDeviceSynchronize(), what);
  EXPECT_EQ(d_o.download(), expected) << what;
}

// `body(problem, shape)` on a fresh DeviceProblem of each kernel family (exact, pasa, and sage8 where the sm_90a
// path runs) and each of `shapes` (exact alone at one query: the decode kernel runs exact and fdpp).
template <class Body>
void for_each_kernel_family(std::initializer_list<Shape> shapes, Body&& body) {
  for (const char* policy : {"exact", "pasa", "sage8"}) {
    if (std::string(policy) == "sage8" && !have_hopper_path()) continue;
    for (const Shape& s : shapes) {
      if (std::string(policy) != "exact" && s.Sq == 1) continue;
      const auto seed = test::fresh_seed();
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << policy << " Sq " << s.Sq);
      std::mt19937_64 rng(seed);
      DeviceProblem problem(s.B, s.Hq, s.Hkv, s.Sq, s.Skv, policy, rng);
      body(problem, s);
    }
  }
}

// A size-1 dimension's stride addresses nothing, and DLPack from torch before 2.9 exports it as 1: a
// call whose size-1 dimensions have stride 1 runs, gives the bits of the call on dense strides, and
// runs on that call's plan. Batch 1, one K/V head (MQA), one query (the decode kernel) and a prefill,
// on the prefill kernels of each family.
TEST(CudaPlan, SizeOneDimensionsRunWithAnyStride) {
  REQUIRE_GPU();
  for_each_kernel_family({{1, 8, 1, 1, 1000, 1}, {1, 4, 1, 300, 300, 1}}, [](DeviceProblem& problem, const Shape&) {
    const auto dense = eager_result(problem.args, problem.d_o);
    AttentionArgs unit = problem.args;
    for (TensorView* t : {&unit.q, &unit.k, &unit.v, &unit.o}) *t = with_size_one_strides_of_one(*t);
    ASSERT_NE(unit.q.stride, problem.args.q.stride);
    EXPECT_EQ(eager_result(unit, problem.d_o), dense) << "size-1 dimensions of stride 1";
    const AttentionPlan plan(problem.args);
    DeviceBuffer workspace(std::max<std::size_t>(plan.workspace_bytes(), 1));
    expect_run_gives(plan, unit, workspace.ptr, problem.d_o, dense, "the dense call's plan");
  });
}

// A stride of 0 broadcasts (docs/api.md): K and V broadcast over the batch and Q over the heads give
// the bits of the call on copies of the broadcast rows, on every prefill kernel family and decode.
TEST(CudaPlan, BroadcastStridesRunAsTheirCopies) {
  REQUIRE_GPU();
  for_each_kernel_family({{2, 4, 2, 1, 700, 1}, {2, 4, 2, 300, 300, 1}}, [](DeviceProblem& problem, const Shape& s) {
    AttentionArgs& args = problem.args;
    const auto copy_block = [](const TensorView& t, int dim, std::int64_t to) {  // index 0 of dim to `to`
      const std::size_t bytes = static_cast<std::size_t>(t.stride[dim]) * 2;
      char* base = static_cast<char*>(t.data);
      cuda_ok(cudaMemcpy(base + to * bytes, base, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    };
    for (std::int64_t b = 1; b < s.B; ++b) {
      copy_block(args.k, 0, b);
      copy_block(args.v, 0, b);
    }
    for (std::int64_t b = 0; b < s.B; ++b) {
      for (std::int64_t h = 1; h < s.Hq; ++h) {
        char* q = static_cast<char*>(args.q.data) + b * args.q.stride[0] * 2;
        cuda_ok(cudaMemcpy(q + h * args.q.stride[1] * 2, q, static_cast<std::size_t>(args.q.stride[1]) * 2,
                           cudaMemcpyDeviceToDevice),
                "cudaMemcpy");
      }
    }
    const auto copies = eager_result(args, problem.d_o);
    AttentionArgs broadcast = args;
    broadcast.k.stride[0] = broadcast.v.stride[0] = 0;
    broadcast.q.stride[1] = 0;
    EXPECT_EQ(eager_result(broadcast, problem.d_o), copies) << "K, V broadcast over the batch, Q over the heads";
    const AttentionPlan plan(broadcast);
    DeviceBuffer workspace(std::max<std::size_t>(plan.workspace_bytes(), 1));
    expect_run_gives(plan, broadcast, workspace.ptr, problem.d_o, copies, "the broadcast call's plan");
  });
}

// Every run of `plan` into `workspace` gives `eager`, bit for bit, however the workspace was left:
// filled with zeros, all-ones, 0x01 bytes, noise and counts (two runs on each), then by a CUDA graph of run()
// replayed back to back and between eager runs.
void expect_runs_need_no_workspace_initialization(const AttentionPlan& plan, const AttentionArgs& args,
                                                  DeviceTensor& d_o, const std::vector<std::uint8_t>& eager,
                                                  void* workspace, std::mt19937_64& rng) {
  const auto run_and_check = [&](const char* what) { expect_run_gives(plan, args, workspace, d_o, eager, what); };
  const std::size_t bytes = plan.workspace_bytes();
  std::vector<std::uint8_t> noise(bytes);
  for (auto& byte : noise) byte = static_cast<std::uint8_t>(rng());
  // 8-byte words (w << 32 | 1): a count of one under a different number in every word, as counters
  // that other launches left would hold.
  std::vector<std::uint64_t> counts(bytes / 8);
  for (std::size_t w = 0; w < counts.size(); ++w) counts[w] = static_cast<std::uint64_t>(w) << 32 | 1u;
  for (const int fill : {0x00, 0xff, 0x01, -1, -2}) {
    if (fill >= 0) {
      cuda_ok(cudaMemset(workspace, fill, bytes), "cudaMemset");
    } else if (fill == -1) {
      cuda_ok(cudaMemcpy(workspace, noise.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    } else {
      cuda_ok(cudaMemcpy(workspace, counts.data(), counts.size() * 8, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    run_and_check("run on a workspace of other bytes");
    run_and_check("a second run on the same workspace");
  }
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  AttentionArgs on_stream = args;
  on_stream.stream = stream;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = capture_run(plan, on_stream, workspace, graph);
  for (int replay = 0; replay < 3; ++replay) {  // two replays back to back, then a run after each
    d_o.poison();
    cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "graph replay");
    EXPECT_EQ(d_o.download(), eager) << "graph replay " << replay;
    if (replay > 0) run_and_check("a run between replays");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// A decode plan's workspace (the splits' partials) needs no initialization: whatever bytes it held
// before (zeros, ones, arbitrary data, another problem's partials), and however eager runs and graph
// replays interleave on it, the result is the eager call's, bit for bit.
TEST(CudaPlan, DecodeWorkspaceNeedsNoInitialization) {
  REQUIRE_GPU();
  for (const char* policy_text : {"exact", "fdpp"}) {
    const auto seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << policy_text);
    std::mt19937_64 rng(seed);
    DeviceProblem problem(1, 32, 8, 1, 4096, policy_text, rng);
    const AttentionArgs& args = problem.args;
    DeviceTensor& d_o = problem.d_o;
    const auto eager = eager_result(args, d_o);

    const AttentionPlan plan(args);
    ASSERT_GT(plan.workspace_bytes(), 0u) << "B 1: the plan should split the keys";
    DeviceBuffer workspace(plan.workspace_bytes());
    expect_runs_need_no_workspace_initialization(plan, args, d_o, eager, workspace.ptr, rng);
    // Another problem (another split count) on the same workspace, alternately.
    AttentionArgs shorter = args;
    shorter.k.shape[2] = shorter.v.shape[2] = 1500;
    const auto eager_shorter = eager_result(shorter, d_o);
    const AttentionPlan plan_shorter(shorter);
    ASSERT_LE(plan_shorter.workspace_bytes(), plan.workspace_bytes());
    for (int round = 0; round < 2; ++round) {
      expect_run_gives(plan_shorter, shorter, workspace.ptr, d_o, eager_shorter,
                       "1500 keys after 4096 on the same workspace");
      expect_run_gives(plan, args, workspace.ptr, d_o, eager, "4096 keys after 1500 on the same workspace");
    }
  }
}

// A split decode merges in its last split when called eagerly and in a merge kernel when captured into
// a CUDA graph: the two give the same O and LSE bits. The shapes cross the merge's two ways of running
// a (row, piece) item (decode_merge.cuh): GQA rows, where the last split gives a thread all four
// ways of an item and the merge kernel a way each, at every head dim (d 256: both a thread an item);
// many splits (more than one batch of loads; 140 requested: 140 in the plan, 40: 35); MHA at one
// query (a way a thread in both); a short last row chunk (33 packed rows: 32 and 1).
TEST(CudaPlan, CapturedDecodeMergesAsTheEagerCall) {
  REQUIRE_GPU();
  struct MergeShape {
    Shape shape;
    std::int64_t D;
  };
  const MergeShape shapes[] = {{{1, 4, 4, 1, 8960, 20}, 128},  {{1, 4, 4, 1, 8960, 140}, 128},
                               {{2, 32, 8, 1, 8960, 40}, 128}, {{2, 32, 8, 1, 8960, 40}, 64},
                               {{2, 32, 8, 1, 8960, 40}, 96},  {{1, 32, 8, 1, 8960, 40}, 256},
                               {{1, 32, 1, 1, 8960, 20}, 128}, {{1, 33, 1, 1, 8960, 20}, 128}};
  for (const MergeShape& m : shapes) {
    const Shape& s = m.shape;
    const auto seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " B" << s.B << " Hq" << s.Hq << " Hkv" << s.Hkv
                                      << " D" << m.D << " splits " << s.splits);
    std::mt19937_64 rng(seed);
    DeviceProblem problem(s.B, s.Hq, s.Hkv, s.Sq, s.Skv, "exact", rng, m.D);
    DeviceBuffer lse(static_cast<std::size_t>(s.B * s.Hq * s.Sq) * sizeof(float));
    problem.args.lse = lse_view(static_cast<float*>(lse.ptr), s.B, s.Hq, s.Sq, Device::cuda);
    problem.args.policy.splits = s.splits;
    problem.args.causal = s.Hkv == 1;
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
    problem.args.stream = stream;
    const auto lse_bytes = [&] {
      std::vector<std::uint8_t> bytes(lse.bytes);
      cudaMemcpy(bytes.data(), lse.ptr, lse.bytes, cudaMemcpyDeviceToHost);
      cudaMemset(lse.ptr, 0xff, lse.bytes);  // (poisoned for the next call)
      return bytes;
    };
    cudaMemset(lse.ptr, 0xff, lse.bytes);
    const auto eager = eager_result(problem.args, problem.d_o);
    const auto eager_lse = lse_bytes();
    const AttentionPlan plan(problem.args);
    DeviceBuffer workspace(plan.workspace_bytes());
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = capture_run(plan, problem.args, workspace.ptr, graph);
    problem.d_o.poison();
    cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream), "graph replay");
    EXPECT_EQ(problem.d_o.download(), eager) << "the merge kernel's O differs from the merge in the last split";
    EXPECT_EQ(lse_bytes(), eager_lse) << "the merge kernel's LSE differs from the merge in the last split";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// The sm_90a prefill kernels draw their tiles from a counter in the workspace (tile_scheduler.cuh),
// tagged with the launch's number and cleared by its last draw: whatever bytes the workspace held, and however
// eager runs and graph replays interleave on it, every tile is computed once and the result is the
// eager call's, bit for bit. Causal, with more tiles than SMs, so that the CTAs draw many times.
TEST(CudaPlan, PrefillWorkspaceNeedsNoInitialization) {
  REQUIRE_HOPPER_PATH();
  for (const char* policy_text : {"exact", "pasa", "sage8"}) {
    const auto seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << policy_text);
    std::mt19937_64 rng(seed);
    DeviceProblem problem(4, 8, 2, 2048, 2048, policy_text, rng);
    problem.args.causal = true;
    const AttentionArgs& args = problem.args;
    DeviceTensor& d_o = problem.d_o;
    const auto eager = eager_result(args, d_o);
    std::size_t unwritten = 0;  // poison (all-ones fp16 words) left where a tile was skipped
    for (std::size_t i = 0; i + 1 < eager.size(); i += 2) unwritten += eager[i] == 0xff && eager[i + 1] == 0xff;
    ASSERT_EQ(unwritten, 0u) << "elements of O the eager call did not write";

    const AttentionPlan plan(args);
    ASSERT_GT(plan.workspace_bytes(), 0u) << "the tile counter's workspace";
    DeviceBuffer workspace(plan.workspace_bytes());
    expect_runs_need_no_workspace_initialization(plan, args, d_o, eager, workspace.ptr, rng);
  }
}

TEST(CudaPlan, RunRefusesAnotherProblemAndAMissingOrMisalignedWorkspace) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  Tensor4 q = test::random_tensor(1, 32, 1, 128, rng, DType::f16);
  Tensor4 k = test::random_tensor(1, 8, 2000, 128, rng, DType::f16);
  Tensor4 o = test::make_tensor(1, 32, 1, 128, DType::f16);
  DeviceTensor dq(q), dk(k), dv(k), d_o(o);
  AttentionArgs args = device_args(dq, dk, dv, d_o);
  args.policy = exact_fp16(4);
  const AttentionPlan plan(args);
  ASSERT_GT(plan.workspace_bytes(), 0u);
  test::expect_error([&] { plan.run(args, nullptr); }, "workspace: null, but the plan needs");
  DeviceBuffer workspace(plan.workspace_bytes() + 256);
  test::expect_error([&] { plan.run(args, static_cast<char*>(workspace.ptr) + 16); }, "is not 256-byte aligned");
  AttentionArgs shorter = args;
  shorter.k.shape[2] = shorter.v.shape[2] = 1999;
  test::expect_error([&] { plan.run(shorter, nullptr); }, "k: differs from the problem the plan was made for");
}

// A CUDA error the caller's own earlier call left pending (a failed cudaMalloc) is not reported as a
// failure of pasa's launches, on the dense call's and a plan's path.
TEST(CudaPlan, ACallersPendingErrorIsNotReportedAsPasas) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  DeviceProblem problem(1, 4, 4, 200, 200, "exact", rng);
  const auto eager = eager_result(problem.args, problem.d_o);
  const AttentionPlan plan(problem.args);
  DeviceBuffer workspace(std::max<std::size_t>(plan.workspace_bytes(), 1));
  for (int path = 0; path < 2; ++path) {
    void* huge = nullptr;
    ASSERT_NE(cudaMalloc(&huge, std::size_t{1} << 60), cudaSuccess) << "an allocation of 2^60 bytes succeeded";
    problem.d_o.poison();
    if (path == 0) {
      attention(problem.args);
    } else {
      plan.run(problem.args, workspace.ptr);
    }
    cuda_ok(cudaDeviceSynchronize(), "the call after a failed cudaMalloc");
    EXPECT_EQ(problem.d_o.download(), eager) << (path == 0 ? "pasa::attention" : "plan.run");
  }
}

// An fdpp call's stats read its recompute count back, which waits for the stream: on a stream being
// captured that is refused before anything is launched, and the capture stays valid.
TEST(CudaPlan, FdppStatsAreRefusedOnACapturingStream) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  DeviceProblem problem(1, 32, 8, 1, 4096, "fdpp", rng);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
  problem.args.stream = stream;
  AttentionStats stats;
  problem.args.stats = &stats;
  const AttentionPlan plan(problem.args);
  DeviceBuffer workspace(std::max<std::size_t>(plan.workspace_bytes(), 1));
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  test::expect_error([&] { plan.run(problem.args, workspace.ptr); }, "stats: an fdpp call");
  test::expect_error([&] { attention(problem.args); }, "stats: an fdpp call");
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << "the refused calls broke the capture";
  if (graph != nullptr) {
    std::size_t nodes = 1;
    cuda_ok(cudaGraphGetNodes(graph, nullptr, &nodes), "cudaGraphGetNodes");
    EXPECT_EQ(nodes, 0u) << "a refused call left work in the graph";
    cudaGraphDestroy(graph);
  }
  // Without stats the same plan captures.
  problem.args.stats = nullptr;
  cudaGraphExec_t exec = capture_run(plan, problem.args, workspace.ptr, graph);
  EXPECT_NE(exec, nullptr);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// A plan launches on the calling thread's current device: run from a thread whose current device is
// another (a new thread's is 0) is refused, naming both devices, before any launch.
TEST(CudaPlan, RunOnAnotherCurrentDeviceIsRefused) {
  REQUIRE_GPU();
  int devices = 0;
  cuda_ok(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices < 2) GTEST_SKIP() << "needs two CUDA devices; this machine has " << devices;
  std::mt19937_64 rng(test::fresh_seed());
  cuda_ok(cudaSetDevice(1), "cudaSetDevice(1)");
  {
    DeviceProblem problem(1, 4, 4, 64, 64, "exact", rng);
    const AttentionPlan plan(problem.args);
    DeviceBuffer workspace(std::max<std::size_t>(plan.workspace_bytes(), 1));
    cuda_ok(cudaSetDevice(0), "cudaSetDevice(0)");
    test::expect_error([&] { plan.run(problem.args, workspace.ptr); },
                       "the plan was made on CUDA device 1, but the calling thread's current device is 0");
    cuda_ok(cudaSetDevice(1), "cudaSetDevice(1)");
  }
  cuda_ok(cudaSetDevice(0), "cudaSetDevice(0)");
}

}  // namespace
}  // namespace pasa
