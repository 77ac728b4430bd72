// SPDX-License-Identifier: Apache-2.0
// What every CUDA entry point checks of the tensors it is handed before it launches anything: that
// their memory is the device's, and that their rows are whole, aligned 16-byte chunks.
#pragma once

#include "pasa/attention.h"

namespace pasa {

// `ptr` must be device (or managed) memory of `device`, not a host pointer.
void check_device_pointer(const void* ptr, const char* name, int device);

// The kernels read and write whole 16-byte rows: head-dim stride 1, strides in whole 16 bytes (the
// plan checks, on canonical_strides), and 16-byte aligned data pointers (each call checks).
void check_layout(const TensorView& t, const char* name);
void check_aligned(const void* data, const char* name);
void check_lse_aligned(const float* lse);  // (null, or 4-byte aligned)

}  // namespace pasa
