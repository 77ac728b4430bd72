// SPDX-License-Identifier: Apache-2.0
#include "cuda/host/kernel_specs.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "cuda/host/decode_params.h"
#include "cuda/host/kernel_params.h"

// 1 when the build compiled the sm_90a kernels (a 90a entry in its CUDA architectures), else 0.
#ifndef PASA_HOPPER_KERNELS
#error "PASA_HOPPER_KERNELS must be defined (0 or 1): CMakeLists.txt sets it"
#endif

namespace pasa::cuda {
namespace {

template <std::size_t N>
bool contains(const int (&dims)[N], std::int64_t d) {
  return std::find(std::begin(dims), std::end(dims), d) != std::end(dims);
}

std::string head_dim_refusal(std::int64_t dim, const char* supported) {
  return "head dim " + std::to_string(dim) + " (it takes " + supported + ")";
}

std::string smem_refusal(int bytes, const DeviceInfo& d) {
  if (bytes <= d.max_smem) return {};
  return "needs " + std::to_string(bytes) + " bytes of shared memory per CTA, the " + sm_name(d) + " device grants " +
         std::to_string(d.max_smem) + (d.max_smem == smem_limit_from_env() ? " (PASA_CUDA_SMEM_LIMIT)" : "");
}

// The sm_90a kernels of one family (the architecture is the spec's own check).
std::string accepts_hopper(const Candidate& c, Family family, const char* policies) {
  if (c.family != family) return std::string("runs ") + policies;
  if (!contains(cuda::kHopperHeadDims, c.shape.dim)) return head_dim_refusal(c.shape.dim, "64 or 128");
  return {};
}

std::string accepts_exact_hopper(const Candidate& c) {
  if (c.family == Family::exact && c.alpha < 0.0) {
    return "a negative softmax scale (the portable kernel flips Q as it loads it; TMA copies Q as it is)";
  }
  return accepts_hopper(c, Family::exact, "the exact policy");
}
std::string accepts_pasa_hopper(const Candidate& c) {
  return accepts_hopper(c, Family::pasa, "the pasa, pasa_accurate and pasa_fp16acc policies");
}
std::string accepts_sage8_hopper(const Candidate& c) {
  if (c.family == Family::sage8 && c.alpha < 0.0) {
    return "a negative softmax scale (it takes the score maxima before the scale, which must be positive)";
  }
  return accepts_hopper(c, Family::sage8, "the sage8 and sage_fp8 policies");
}

std::string accepts_exact_portable(const Candidate& c) {
  if (c.family != Family::exact) return "runs the exact policy";
  // Every portable head dim is checked before the specs; the tile's shared memory is not.
  switch (c.shape.dim) {
    case 64: return smem_refusal(cuda::exact_tile(64).smem_bytes(), c.device);
    case 96: return smem_refusal(cuda::exact_tile(96).smem_bytes(), c.device);
    case 128: return smem_refusal(cuda::exact_tile(128).smem_bytes(), c.device);
    case 256: return smem_refusal(cuda::exact_tile(256).smem_bytes(), c.device);
  }
  return head_dim_refusal(c.shape.dim, "64, 96, 128 or 256");
}

std::string accepts_pasa_portable(const Candidate& c) {
  if (c.family != Family::pasa) return "runs the pasa and pasa_accurate policies";
  if (c.pasa_fp16_accumulator) {
    return "runs pasa and pasa_accurate, not pasa_fp16acc (its P V in fp16 accumulators is wgmma's, sm_90a)";
  }
  if (!contains(cuda::kPortableHeadDims, c.shape.dim)) return head_dim_refusal(c.shape.dim, "64, 96, 128 or 256");
  return smem_refusal(cuda::PasaPortableTile{static_cast<int>(c.shape.dim)}.smem_bytes(), c.device);
}

constexpr KernelSpec kKernelSpecs[] = {
    {Kernel::decode, "decode (split-KV)", Arch::sm80, accepts_decode, false},
    {Kernel::exact_hopper, "exact (sm_90a)", Arch::sm90a, accepts_exact_hopper, true},
    {Kernel::pasa_hopper, "pasa (sm_90a)", Arch::sm90a, accepts_pasa_hopper, false},
    {Kernel::sage8_hopper, "sage8, sage_fp8 (sm_90a)", Arch::sm90a, accepts_sage8_hopper, false},
    {Kernel::exact_portable, "exact (portable)", Arch::sm80, accepts_exact_portable, true},
    {Kernel::pasa_portable, "pasa (portable)", Arch::sm80, accepts_pasa_portable, false},
};

}  // namespace

std::span<const KernelSpec> kernel_specs() { return kKernelSpecs; }

std::string accepts_decode(const Candidate& c) {
  if (c.family != Family::exact && c.family != Family::fdpp) return "runs the exact and fdpp policies";
  if (c.shape.seq_q > cuda::kDecodeMaxSeqQ) {
    const std::string takes = "takes S_q <= " + std::to_string(cuda::kDecodeMaxSeqQ) + " (q has S_q = " +
                              std::to_string(c.shape.seq_q) + ")";
    return c.family == Family::fdpp
               ? "policies in fdpp's formats (fdpp, fdpp,shift=none, fa16_fp32) run on the CUDA decode path "
                 "only, which " + takes
               : takes;
  }
  if (!contains(cuda::kDecodeHeadDims, c.shape.dim)) return head_dim_refusal(c.shape.dim, "64, 96, 128 or 256");
  const int dim = static_cast<int>(c.shape.dim);
  const int m_tiles = cuda::decode_m_tiles(dim, c.shape.group() * c.shape.seq_q);
  return smem_refusal(cuda::decode_tile_for(dim, m_tiles, c.device.max_smem).smem_bytes(m_tiles), c.device);
}

std::string refusal(const KernelSpec& spec, const Candidate& c) {
  std::string why = spec.accepts(c);
  if (why.empty() && (c.window || c.softcap || c.mask) && !spec.score_mods) {
    why = "has no sliding window, softcap or attention mask (the exact policy's prefill kernels have them)";
  }
  if (why.empty() && spec.arch == Arch::sm90a) why = c.hopper_refusal;
  return why;
}

std::string hopper_refusal(const DeviceInfo& d, bool portable_requested) {
  if (d.major != 9 || d.minor != 0) {
    return "needs sm_90a, the device is " + sm_name(d) + " (the portable path supports exact, pasa and fdpp)";
  }
  if (PASA_HOPPER_KERNELS == 0) {
    return "needs sm_90a kernels, and pasa was built without them (no 90a in its CUDA architectures; "
           "the portable path supports exact, pasa and fdpp)";
  }
  if (portable_requested) {
    return "needs sm_90a, and the portable path was asked for (AttentionArgs::cuda_path or "
           "PASA_CUDA_PATH=portable), which supports exact, pasa and fdpp";
  }
  return {};
}

}  // namespace pasa::cuda
