// SPDX-License-Identifier: Apache-2.0
// The table of kernels the CUDA dispatch (cuda_attention.cpp) chooses from: each spec says whether
// its kernel runs a problem (policy family, shape, score modifiers, shared memory, architecture), and
// why not, so that a plan takes the first that accepts and a refusal lists every reason.
#pragma once

#include <span>
#include <string>

#include "attention_checks.h"
#include "cuda/host/device_info.h"
#include "cuda/host/policy_family.h"

namespace pasa::cuda {

// The kernels a plan chooses from.
enum class Kernel { decode, exact_hopper, pasa_hopper, sage8_hopper, exact_portable, pasa_portable };

// What the kernel specs judge: the problem as planned so far.
struct Candidate {
  Family family;
  const ProblemShape& shape;
  double alpha;  // the softmax scale
  bool window;   // a sliding window (AttentionArgs::window_left / window_right)
  bool softcap;  // a logit softcap
  bool mask;     // an attention mask
  bool pasa_fp16_accumulator;  // the pasa_fp16acc policy (P V in fp16 accumulators)
  const DeviceInfo& device;
  std::string hopper_refusal;  // why the sm_90a kernels cannot run here; empty when they can
};

// What a kernel's instructions need. sm80: the portable kernels, compiled for every architecture of
// the build (check_device refuses devices below 8.0 before any spec is asked). sm90a: wgmma and TMA,
// compiled for the 90a entries only, and taken only on the Hopper path (hopper_refusal).
enum class Arch { sm80, sm90a };

// A kernel the dispatch can choose: accepts() returns empty when the kernel runs the candidate's
// family and shape, else why it does not; the architecture is checked after it. Tried in order; the
// plan takes the first that accepts.
struct KernelSpec {
  Kernel kernel;
  const char* name;
  Arch arch;
  std::string (*accepts)(const Candidate&);
  bool score_mods;  // runs a sliding window, a logit softcap and an attention mask
};

// Every spec, in the order the plan tries them.
std::span<const KernelSpec> kernel_specs();

// Why `spec` does not run the candidate; empty when it does.
std::string refusal(const KernelSpec& spec, const Candidate& c);

// Why the sm_90a kernels cannot run on `d` for this request; empty when they can.
std::string hopper_refusal(const DeviceInfo& d, bool portable_requested);

// Why the split-KV decode kernel does not run the candidate's family and shape; empty when it does.
std::string accepts_decode(const Candidate& c);

}  // namespace pasa::cuda
