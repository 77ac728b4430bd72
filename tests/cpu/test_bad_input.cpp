// SPDX-License-Identifier: Apache-2.0
// Every bad-input class of the attention API gives a pasa::Error naming the argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention_checks.h"
#include "pasa/attention.h"
#include "pasa/tensor.h"
#include "test_util.h"

namespace pasa {
namespace {

using test::expect_error;
using test::Tensor4;

struct Problem {
  Tensor4 q, k, v, o;
  std::vector<float> lse;
  AttentionArgs args;
  Problem(std::int64_t Hq = 4, std::int64_t Hkv = 2, std::int64_t S = 8, std::int64_t D = 16) {
    std::mt19937_64 rng(test::fresh_seed());
    q = test::random_tensor(1, Hq, S, D, rng);
    k = test::random_tensor(1, Hkv, S, D, rng);
    v = test::random_tensor(1, Hkv, S, D, rng);
    o = test::make_tensor(1, Hq, S, D, DType::f32);
    lse.resize(Hq * S);
    args = AttentionArgs{q.view, k.view, v.view, o.view, lse_view(lse.data(), 1, Hq, S)};
  }
};

TEST(BadInput, NullPointers) {
  Problem p;
  p.args.q.data = nullptr;
  expect_error([&] { attention(p.args); }, "q: data pointer is null");
  Problem p2;
  p2.args.o.data = nullptr;
  expect_error([&] { attention(p2.args); }, "o: data pointer is null");
}

TEST(BadInput, MismatchedShapes) {
  Problem p;
  p.args.v.shape[2] = 7;
  expect_error([&] { attention(p.args); }, "v: shape");
  Problem p2;
  p2.args.o.shape[3] = 8;
  expect_error([&] { attention(p2.args); }, "o: shape");
  Problem p3;
  p3.args.k.shape[3] = 8;
  p3.args.v.shape[3] = 8;
  expect_error([&] { attention(p3.args); }, "k: head dim 8 differs from q's 16");
  Problem p4;
  p4.args.lse.shape[2] = 3;
  expect_error([&] { attention(p4.args); }, "lse: shape");
}

TEST(BadInput, QueryHeadsNotAMultipleOfKvHeads) {
  Problem p(3, 2);
  expect_error([&] { attention(p.args); }, "2 K/V heads do not divide the 3 query heads");
}

TEST(BadInput, UnsupportedHeadDim) {
  Problem p(1, 1, 2, 1100);
  expect_error([&] { attention(p.args); }, "head dim 1100");
}

TEST(BadInput, ZeroLengthSequences) {
  Problem p;
  p.args.k.shape[2] = 0;
  p.args.v.shape[2] = 0;
  expect_error([&] { attention(p.args); }, "k: sequence size is 0");
  Problem p2;
  p2.args.q.shape[2] = 0;
  expect_error([&] { attention(p2.args); }, "q: sequence size is 0");
}

TEST(BadInput, UnsupportedDtype) {
  Problem p;
  p.args.k.dtype = static_cast<DType>(9);
  expect_error([&] { attention(p.args); }, "k: unsupported dtype");
}

TEST(BadInput, NonFiniteScale) {
  Problem p;
  p.args.scale = std::numeric_limits<double>::infinity();
  expect_error([&] { attention(p.args); }, "scale: inf is not finite");
  p.args.scale = std::nan("");
  expect_error([&] { attention(p.args); }, "scale: nan is not finite");
}

// A scale beyond the format that applies it would be inf there and turn every output into NaN while
// the fp64 reference is finite: refused, naming the limit. The largest allowed scale still runs.
TEST(BadInput, ScaleBeyondTheFormatThatAppliesIt) {
  Problem p;
  p.args.scale = 1e300;
  expect_error([&] { attention(p.args); }, "scale: 1e+300 is outside");
  p.args.policy = parse_policy("fa16");  // softmax in fp16: the scale must fit in 65504
  p.args.scale = 1e5;
  expect_error([&] { attention(p.args); }, "the fp16 format the policy applies it in");
  p.args.scale = -1e5;
  expect_error([&] { attention(p.args); }, "scale: -100000 is outside [-65504, 65504]");
  // Base-2 scores: the scale applied is times log2 e, so the limit is 65504 / log2 e (pasa's preset).
  p.args.policy = parse_policy("pasa");
  p.args.scale = 50000.0;
  expect_error([&] { attention(p.args); }, "scale: 50000 is outside [-45403.");
  p.args.scale = 45000.0;
  EXPECT_NO_THROW(attention(p.args));
  p.args.policy = parse_policy("exact");
  p.args.scale = 1e30;  // representable in fp32: accepted
  EXPECT_NO_THROW(attention(p.args));
}

// A nonzero scale below the smallest normal value of the format that applies it rounds to 0 there
// (fa16,scale=q with fp16 inputs: every key weighed the same, silently) or keeps a few bits: refused.
// Zero itself is a scale (every key weighs the same, on purpose), and fp32's range takes 1e-30.
TEST(BadInput, ScaleBelowTheFormatThatAppliesIt) {
  Problem p;
  for (const char* policy : {"fa16,scale=q", "fa16_fp32,scale=k", "fdpp,scale=q", "fa16"}) {
    p.args.policy = parse_policy(policy);
    p.args.scale = 2e-9;
    expect_error([&] { attention(p.args); }, "scale: 2e-09 is below 6.1035");
    p.args.scale = 1e-3;
    EXPECT_NO_THROW(attention(p.args)) << policy;
  }
  p.args.policy = parse_policy("exact");
  p.args.scale = 1e-39;
  expect_error([&] { attention(p.args); }, "the fp32 format the policy applies it in");
  for (const double ok : {0.0, 1e-30}) {
    p.args.scale = ok;
    EXPECT_NO_THROW(attention(p.args)) << ok;
  }
}

// An empty tensor reports its empty dimension, not the null data pointer empty storage has.
TEST(BadInput, EmptyTensorReportsItsSizeNotItsPointer) {
  Problem p;
  p.args.k.shape[1] = 0;
  p.args.k.data = nullptr;
  expect_error([&] { attention(p.args); }, "k: heads size is 0");
}

TEST(BadInput, NonFiniteInputValues) {
  Problem p;
  static_cast<float*>(p.args.k.data)[p.args.k.offset(0, 1, 3, 5)] = std::nanf("");
  expect_error([&] { attention(p.args); }, "k: non-finite value at [b, h, s, d] = [0, 1, 3, 5]");
  Problem p2;
  static_cast<float*>(p2.args.v.data)[0] = std::numeric_limits<float>::infinity();
  expect_error([&] { attention(p2.args); }, "v: non-finite value at [b, h, s, d] = [0, 0, 0, 0]");
}

// A broadcast view (stride 0) is checked once per distinct element: a key row broadcast to 2^40 keys
// costs one row's check, finite or not (element by element it would take hours).
TEST(BadInput, NonFiniteCheckOfABroadcastViewReadsEachElementOnce) {
  Problem p;
  TensorView k = p.args.k;
  k.shape[2] = std::int64_t{1} << 40;
  k.stride[2] = 0;
  check_finite_host(k, "k");
  static_cast<float*>(k.data)[k.offset(0, 1, 0, 5)] = std::nanf("");
  expect_error([&] { check_finite_host(k, "k"); }, "k: non-finite value at [b, h, s, d] = [0, 1, 0, 5]");
}

TEST(BadInput, BadStridesAndDevices) {
  Problem p;
  p.args.o.stride[3] = 0;
  expect_error([&] { attention(p.args); }, "o: stride of the head dim dimension is 0");
  Problem p2;
  p2.args.k.device = Device::cuda;
  expect_error([&] { attention(p2.args); }, "different devices");
  // Enumerators out of range are named, not run as something else (a device of code 5 was "on the
  // GPU", a backend of code 7 ran the emulator).
  Problem p3;
  p3.args.q.device = p3.args.k.device = p3.args.v.device = p3.args.o.device = static_cast<Device>(5);
  expect_error([&] { attention(p3.args); }, "q: unknown device (code 5)");
  Problem p4;
  p4.args.backend = static_cast<Backend>(7);
  expect_error([&] { attention(p4.args); }, "backend: unknown backend (code 7)");
  Problem p5;
  p5.args.cuda_path = static_cast<CudaPath>(3);
  expect_error([&] { attention(p5.args); }, "cuda_path: unknown path (code 3)");
  // The LSE's strides: positive where the dimension has more than one element; a size-1 dimension's
  // (the batch here) is never read, so any is taken, as for the tensors.
  Problem lse_rows;
  lse_rows.args.lse.stride[2] = 0;
  expect_error([&] { attention(lse_rows.args); }, "lse: stride 2 is 0 (must be positive)");
  Problem lse_batch;
  attention(lse_batch.args);
  const std::vector<float> dense = lse_batch.lse;
  std::fill(lse_batch.lse.begin(), lse_batch.lse.end(), 0.0f);
  lse_batch.args.lse.stride[0] = 0;
  attention(lse_batch.args);
  EXPECT_EQ(lse_batch.lse, dense);
}

TEST(BadInput, CudaRequestedWithHostTensors) {
  Problem p;
  p.args.backend = Backend::cuda;
  try {
    attention(p.args);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
  }
}

TEST(BadInput, InvalidPolicy) {
  Problem p;
  p.args.policy.beta = 1.0;
  p.args.policy.shift = Shift::pasa;
  expect_error([&] { attention(p.args); }, "beta");
  Problem p2;
  p2.args.policy.block_kv = 0;
  expect_error([&] { attention(p2.args); }, "s2");
}

// A HostTensor is plain data a caller may fill by hand: its view and conversions check that the bytes
// fill the shape (a view of 4 bytes as [1, 1, 4, 4] was handed out and read past its end; a shape
// whose element count wraps to 0 in 64 bits converted to nothing).
TEST(BadInput, HostTensorBytesMustFillTheShape) {
  HostTensor short_of_bytes{DType::f32, {1, 1, 4, 4}, std::vector<std::uint8_t>(4)};
  test::expect_error([&] { short_of_bytes.view("q"); }, "q: tensor holds 4 bytes, its shape needs 64");
  test::expect_error([&] { to_float(short_of_bytes); }, "to_float: tensor holds 4 bytes, its shape needs 64");
  const HostTensor wrapping{DType::f32, {std::int64_t{1} << 62, 4}, {}};
  test::expect_error([&] { to_float(wrapping); }, "to_float: element count of shape");
  const HostTensor negative{DType::f32, {-1, -4}, std::vector<std::uint8_t>(16)};
  test::expect_error([&] { to_float(negative); }, "to_float: negative dimension");
  test::expect_error([] { from_float({}, {std::int64_t{1} << 32, std::int64_t{1} << 32}, DType::f16); },
                     "from_float: element count of shape");
  test::expect_error([] { from_float(std::vector<float>(4), {-2, -2}, DType::f16); }, "from_float: negative dimension");
  EXPECT_EQ(to_float(from_float({1.5f, -2.0f}, {2}, DType::bf16)), (std::vector<float>{1.5f, -2.0f}));
}

// The view helpers' strides, and a view's element count, past int64: an error, not a wrapped stride.
TEST(BadInput, ViewsWhoseStridesPassInt64) {
  const std::int64_t big = std::int64_t{1} << 31;
  test::expect_error([&] { bhsd_view(nullptr, DType::f32, 2, big, big, big); },
                     "bhsd_view [2, 2147483648, 2147483648, 2147483648]: its strides pass 2^63 elements");
  test::expect_error([&] { bshd_view(nullptr, DType::f32, 2, big, big, big); }, "bshd_view [2, ");
  test::expect_error([] { lse_view(nullptr, 2, std::int64_t{1} << 40, std::int64_t{1} << 40); },
                     "lse_view [2, 1099511627776, 1099511627776]: its strides pass 2^63 elements");
  const TensorView wide = bhsd_view(nullptr, DType::f32, big, big, 4, 1);
  test::expect_error([&] { (void)wide.numel(); }, "its element count passes 2^63");
  EXPECT_EQ(bhsd_view(nullptr, DType::f32, 2, 3, 5, 7).numel(), 210);
}

}  // namespace
}  // namespace pasa
