// SPDX-License-Identifier: Apache-2.0
// pasa/attention_plan.h — plan once, run many times. A plan takes every host decision of
// pasa::attention for one problem (the checks of shapes, strides, dtypes and policy, the backend, the
// kernel, the decode split count, the workspace size, the device's attributes); run() then only fills
// the kernels' arguments and launches, into a workspace the caller owns.
#pragma once

#include <cstddef>
#include <memory>

#include "pasa/attention.h"

namespace pasa {

class AttentionPlan {
 public:
  // Checks `args` as pasa::attention does, except what depends on the data (the memory kind of the
  // pointers, the CPU's scan for non-finite values: run() does that) and decides everything. Only the
  // problem is kept, not the pointers. Throws pasa::Error.
  explicit AttentionPlan(const AttentionArgs& args);

  // Bytes of workspace run() needs: device memory of the plan's device for the GPU backend (a decode
  // call's partials; the sm_90a prefill kernels' tile counter, 256 bytes), nothing on the CPU. 0 when
  // no scratch is needed. Its contents before a run do not matter.
  std::size_t workspace_bytes() const;

  // Runs `args`, which must describe the plan's problem: only the data pointers, the stream and the
  // stats may differ from the arguments the plan was made with (anything else: pasa::Error naming the
  // field, nothing launched). `workspace`: at least workspace_bytes(), 256-byte aligned, owned by the
  // caller and used by one run at a time (stream order). On the GPU, run() allocates nothing, queries
  // the current device's number only (it must be the plan's: pasa::Error otherwise) and never
  // synchronizes (except to read an fdpp call's recompute count into args.stats, a pasa::Error on a
  // capturing stream), so it can be captured in a CUDA graph; the graph replays the pointers it
  // captured. It trusts that the pointers are device memory of the plan's device (pasa::attention
  // checks that on every call). The pasa and sage8 prefill kernels still take their prepass scratch from pasa's
  // own stream-ordered pool, which CUDA graphs capture as memory nodes.
  void run(const AttentionArgs& args, void* workspace = nullptr) const;

 private:
  struct State;
  const State& state() const;  // (a moved-from plan: pasa::Error)
  std::shared_ptr<const State> state_;
};

}  // namespace pasa
