// SPDX-License-Identifier: Apache-2.0
// What the CUDA dispatch (cuda_attention.cpp) reads of a device, queried once per device for the life
// of the process, and of the environment (PASA_CUDA_SMEM_LIMIT, PASA_CUDA_PATH, each read once: a
// plan's choice must not change under a running process); and a device's name, for errors.
#pragma once

#include <string>

namespace pasa::cuda {

struct DeviceInfo {
  int major, minor, sm_count, l2_bytes;
  int max_smem;  // bytes of shared memory a CTA may opt in to (at most PASA_CUDA_SMEM_LIMIT)
};

// PASA_CUDA_SMEM_LIMIT: unset or empty for none (INT_MAX), else the most bytes of shared memory a CTA
// may take in the decode and portable kernels' tile choices, so that a GPU with more takes the
// choices of one with less (a 99 KiB device's on an H100, say).
int smem_limit_from_env();

// The attributes of CUDA device `device` (an ordinal below 64).
const DeviceInfo& device_info(int device);

std::string sm_name(const DeviceInfo& d);  // "sm_90"

// "CUDA device 0 (NVIDIA A100-SXM4-80GB, sm_80)": for errors only (the name is not cached).
std::string device_text(int device, const DeviceInfo& d);

// The current device, which must have compute capability 8.0 or newer (the portable kernels' mma.sync,
// ldmatrix and cp.async); else a pasa::Error naming it.
int check_device();

// PASA_CUDA_PATH: unset, "" or "auto" (the device decides: false) or "portable" (the portable kernels
// on every GPU: true); anything else is a pasa::Error.
bool portable_path_from_env();

}  // namespace pasa::cuda
