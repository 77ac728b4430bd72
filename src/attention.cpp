// SPDX-License-Identifier: Apache-2.0
// pasa::attention: validate once, then hand the problem to a backend.
#include "pasa/attention.h"

#include "attention_checks.h"
#include "cpu/backends.h"
#include "cpu/operands.h"
#include "cuda_backend.h"
#include "memory_budget.h"
#include "pasa/error.h"

namespace pasa {

void attention(const AttentionArgs& args) {
  const ProblemShape shape = check_attention_args(args);
  Backend backend = args.backend;
  if (backend == Backend::automatic) {
    backend = args.q.device == Device::cuda ? Backend::cuda : Backend::emulator;
  }
  if (backend == Backend::cuda) {
    cuda_attention(args, shape);
    return;
  }
  if (args.q.device != Device::cpu) {
    throw Error("backend: the CPU emulator needs host tensors, but q is on the GPU");
  }
  if (shape.dim > 1024) {
    throw Error("q: head dim " + std::to_string(shape.dim) + " is larger than the CPU backends' 1024");
  }
  // Before the inputs are scanned: broadcast (stride-0) inputs can describe more than memory holds.
  require_memory(emulator_memory_bytes(shape, args.policy), "attention (CPU emulator) on " + problem_text(shape));
  check_finite_host(args.q, "q");
  check_finite_host(args.k, "k");
  check_finite_host(args.v, "v");
  emulate_attention(args, shape);
}

}  // namespace pasa
