// SPDX-License-Identifier: Apache-2.0
// The pieces of the `pasa._core` extension: each file binds one area of the C++ API.
#pragma once

#include <nanobind/nanobind.h>

namespace pasa::python {

void bind_policy(nanobind::module_& m);     // bind_policy.cpp: Policy, presets, text form
void bind_attention(nanobind::module_& m);  // bind_attention.cpp: attention, PlannedAttention, reference
void bind_io(nanobind::module_& m);         // bind_io.cpp: .npy / .safetensors
void bind_serving(nanobind::module_& m);    // bind_serving.cpp: varlen and KV-cache layouts

}  // namespace pasa::python
