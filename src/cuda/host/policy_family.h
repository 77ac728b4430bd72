// SPDX-License-Identifier: Apache-2.0
// The policy families the CUDA kernels implement, judged from a Policy's fields (never from its
// text): exact (fp32 scores and softmax; P in the input dtype), pasa (with pasa_accurate and
// pasa_fp16acc), sage8 (with sage_fp8), fdpp.
// Anything else is a pasa::Error naming the field. Plain C++ (the dispatch, cuda_attention.cpp, reads
// it).
#pragma once

#include "pasa/policy.h"
#include "pasa/tensor.h"

namespace pasa {

enum class Family { exact, pasa, fdpp, sage8 };

const char* family_name(Family f);

// The family of `pol` for inputs of dtype `in`, or a pasa::Error naming the field no kernel runs.
// The last answer is cached per thread (classifying builds the presets it compares with, too slow to
// repeat on every call of a decode loop).
Family classify_policy_cached(const Policy& pol, DType in);

}  // namespace pasa
