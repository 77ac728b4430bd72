// SPDX-License-Identifier: Apache-2.0
// AttentionPlan: the checks and decisions of pasa::attention made once; run() compares the call's
// problem with the plan's (a few dozen integer comparisons) and launches.
#include "pasa/attention_plan.h"

#include "text/format.h"

#include "attention_checks.h"
#include "cpu/backends.h"
#include "cpu/operands.h"
#include "cuda_backend.h"
#include "memory_budget.h"
#include "plan_compare.h"
#include "pasa/error.h"

namespace pasa {

struct AttentionPlan::State {
  AttentionArgs problem;  // the arguments planned for (their pointers are never read)
  ProblemShape shape;
  bool on_gpu;
  std::shared_ptr<const CudaPlan> cuda;
};

AttentionPlan::AttentionPlan(const AttentionArgs& args) {
  auto state = std::make_shared<State>();
  state->shape = check_attention_args(args);
  state->problem = args;
  state->problem.stats = nullptr;
  Backend backend = args.backend;
  if (backend == Backend::automatic) {
    backend = args.q.device == Device::cuda ? Backend::cuda : Backend::emulator;
  }
  state->on_gpu = backend == Backend::cuda;
  if (state->on_gpu) {
    state->cuda = plan_cuda_attention(args, state->shape);
  } else {
    if (args.q.device != Device::cpu) {
      throw Error("backend: the CPU emulator needs host tensors, but q is on the GPU");
    }
    if (state->shape.dim > 1024) {
      throw Error(text::format("q: head dim {} is larger than the CPU backends' 1024", state->shape.dim));
    }
    require_memory(emulator_memory_bytes(state->shape, args.policy),
                   "attention (CPU emulator) on " + problem_text(state->shape));
    // A singular PASA shift depends on the policy and the scale only: refused when the plan is made.
    check_emulator_policy(args, state->shape.dim);
  }
  state_ = std::move(state);
}

// A plan moved from holds no state: using it is an error, not a null dereference.
const AttentionPlan::State& AttentionPlan::state() const {
  if (!state_) throw Error("AttentionPlan: a moved-from plan has no problem; make a new one");
  return *state_;
}

std::size_t AttentionPlan::workspace_bytes() const {
  return state().on_gpu ? cuda_plan_workspace_bytes(*state().cuda) : 0;
}

void AttentionPlan::run(const AttentionArgs& args, void* workspace) const {
  const State& s = state();
  check_same_problem(differing_field(args, s.problem));
  check_data_pointers({{&args.q, "q"}, {&args.k, "k"}, {&args.v, "v"}, {&args.o, "o"}});
  if (args.mask.kind != MaskKind::none && args.mask.data == nullptr) throw Error("mask: data pointer is null");
  check_output_memory(args);  // the pointers may be new; a few integer comparisons
  if (s.on_gpu) {
    check_workspace(cuda_plan_workspace_bytes(*s.cuda), workspace);
    run_cuda_plan(*s.cuda, args, workspace);
    return;
  }
  check_finite_host(args.q, "q");
  check_finite_host(args.k, "k");
  check_finite_host(args.v, "v");
  check_mask_values(args.mask);  // the mask's data may be new too
  emulate_attention(args, s.shape);
}

}  // namespace pasa
