// SPDX-License-Identifier: Apache-2.0
// KVCachePlan: attention_with_kvcache's tensor checks and the GPU decisions made once; run() compares
// the call's problem with the plan's and launches (GPU) or calls attention_with_kvcache (CPU).
#include "cpu/backends.h"
#include "kvcache_checks.h"
#include "pasa/error.h"
#include "pasa/serving.h"
#include "plan_compare.h"

namespace pasa {
namespace {

// The options of a call without the tensors the serving API ignores in them.
AttentionArgs options_only(AttentionArgs options) {
  options.q = options.k = options.v = options.o = TensorView{};
  options.lse = LseView{};
  options.stats = nullptr;
  return options;
}

// The first field in which a call's problem differs from the plan's, or null: every field of
// KVCacheArgs but the data pointers (the index arrays'), the stream and the stats.
const char* differing_kv_field(const KVCacheArgs& call, const KVCacheArgs& plan) {
  if (!same_view(call.q, plan.q)) return "q";
  if (!same_view(call.k_cache, plan.k_cache)) return "k_cache";
  if (!same_view(call.v_cache, plan.v_cache)) return "v_cache";
  if (!same_view(call.k, plan.k) || (call.k.data == nullptr) != (plan.k.data == nullptr)) return "k";
  if (!same_view(call.v, plan.v) || (call.v.data == nullptr) != (plan.v.data == nullptr)) return "v";
  if (!same_view(call.o, plan.o)) return "o";
  if (!same_lse(call.lse, plan.lse)) return "lse";
  if ((call.block_table == nullptr) != (plan.block_table == nullptr)) return "block_table";
  if (call.max_blocks != plan.max_blocks) return "max_blocks";
  if (const char* field = differing_field(options_only(call.options), options_only(plan.options))) return field;
  return nullptr;
}

}  // namespace

struct KVCachePlan::State {
  KVCacheArgs problem;  // the arguments planned for (their pointers are never read)
  bool on_gpu;
  std::shared_ptr<const CudaKvPlan> cuda;
};

KVCachePlan::KVCachePlan(const KVCacheArgs& args) {
  auto state = std::make_shared<State>();
  const KVCacheProblem problem = check_kvcache_tensors(args);
  state->problem = args;
  state->problem.options.stats = nullptr;
  state->on_gpu = problem.on_gpu;
  if (state->on_gpu) {
    state->cuda = plan_cuda_kvcache(problem.whole, cuda_kv_cache(args));
  } else {
    // A singular PASA shift depends on the policy and the scale only: refused when the plan is made.
    check_emulator_policy(args.options, problem.shape.dim);
  }
  state_ = std::move(state);
}

// A plan moved from holds no state: using it is an error, not a null dereference.
const KVCachePlan::State& KVCachePlan::state() const {
  if (!state_) throw Error("KVCachePlan: a moved-from plan has no problem; make a new one");
  return *state_;
}

std::size_t KVCachePlan::workspace_bytes() const {
  return state().on_gpu ? cuda_kvcache_workspace_bytes(*state().cuda) : 0;
}

void KVCachePlan::run(const KVCacheArgs& args, void* workspace) const {
  const State& s = state();
  check_same_problem(differing_kv_field(args, s.problem));
  if (!s.on_gpu) {
    attention_with_kvcache(args);
    return;
  }
  check_data_pointers({{&args.q, "q"}, {&args.o, "o"}, {&args.k_cache, "k_cache"}, {&args.v_cache, "v_cache"}});
  check_kvcache_memory(args, args.k.data != nullptr);  // the pointers may be new
  check_workspace(cuda_kvcache_workspace_bytes(*s.cuda), workspace);
  run_cuda_kvcache(*s.cuda, call_options(args), cuda_kv_cache(args), workspace);
}

}  // namespace pasa
