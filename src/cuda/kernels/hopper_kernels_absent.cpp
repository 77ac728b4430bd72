// SPDX-License-Identifier: Apache-2.0
// The sm_90a launch functions of a build whose CUDA architectures list no 90a (CMakeLists.txt
// compiles this file instead of the Hopper kernels): the dispatch never picks them there, and a
// direct call is a clear error.
#include <cstddef>
#include <string>

#include "cuda/host/kernel_params.h"
#include "pasa/error.h"

namespace pasa::cuda {
namespace {

[[noreturn]] void no_hopper_kernels(const char* kernel) {
  throw Error(std::string(kernel) + ": pasa was built without sm_90a kernels (add 90a to the CUDA "
              "architectures, e.g. \"80;90a\")");
}

}  // namespace

void launch_exact_fwd(const KernelRequest&, void*) { no_hopper_kernels("exact kernel (sm_90a)"); }
void launch_pasa(const PasaRequest&, void*) { no_hopper_kernels("pasa kernel"); }
void launch_pasa_fp16acc(const PasaRequest&, void*) { no_hopper_kernels("pasa_fp16acc kernel"); }
void launch_sage8(const Sage8Request&, void*) { no_hopper_kernels("sage8 kernel"); }
std::size_t sage8_scratch_bytes(const Sage8Request&) { no_hopper_kernels("sage8 kernel"); }

}  // namespace pasa::cuda
