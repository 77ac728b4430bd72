// SPDX-License-Identifier: Apache-2.0
// Outputs that would lose results are refused before anything is written: an output whose indices
// share elements (a stride of 0, interleaved strides), and an output sharing memory with a tensor the
// call reads (or, for the KV-cache API, with the caches the append writes).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "memory_overlap.h"
#include "pasa/attention.h"
#include "pasa/attention_plan.h"
#include "pasa/serving.h"
#include "test_util.h"

namespace pasa {
namespace {

using test::expect_error;
using test::Tensor4;

constexpr std::int64_t kH = 2, kS = 4, kD = 8;

// q, k, v and the outputs carved from one buffer, so a test can point any of them anywhere in it.
struct Arena {
  std::vector<float> memory;
  AttentionArgs args;
  explicit Arena(std::uint64_t seed) : memory(static_cast<std::size_t>(8 * kH * kS * kD)) {
    std::mt19937_64 rng(seed);
    for (float& x : memory) x = static_cast<float>(test::uniform(rng, -1.0, 1.0));
    args.q = at(0);
    args.k = at(1);
    args.v = at(2);
    args.o = at(3);
    args.lse = lse_view(&memory[static_cast<std::size_t>(4 * kH * kS * kD)], 1, kH, kS);
  }
  // The i-th [1, H, S, D] slot of the buffer.
  TensorView at(std::int64_t i) {
    return bhsd_view(&memory[static_cast<std::size_t>(i * kH * kS * kD)], DType::f32, 1, kH, kS, kD);
  }
};

// attention, its plan, and every output byte as it was: the call was refused before any write.
void expect_refused(Arena& a, const std::string& needle) {
  const std::vector<float> before = a.memory;
  expect_error([&] { attention(a.args); }, needle);
  expect_error([&] { AttentionPlan{a.args}; }, needle);
  EXPECT_TRUE(std::memcmp(before.data(), a.memory.data(), before.size() * sizeof(float)) == 0) << needle;
}

TEST(OutputMemory, AnOutputWhoseIndicesShareElementsIsRefused) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  {
    Arena a(seed);
    a.args.o.stride[2] = 0;  // positive strides were already required; this is the stride-0 case
    expect_refused(a, "o: stride of the sequence dimension is 0");
  }
  {
    Arena a(seed);
    a.args.o.stride = {kH * kS * kD, kD, 1, 1};  // [s, d] and [s + 1, d - 1] are one element
    expect_refused(a, "o: sizes [1, 2, 4, 8] with strides [64, 8, 1, 1] address some elements more than once");
  }
  {
    Arena a(seed);
    a.args.o.stride = {kH * kS * kD, kS * kD, 1, kS};  // head dim and sequence swapped: a permutation, fine
    attention(a.args);
  }
  {
    Arena a(seed);
    a.args.lse.stride = {kH * kS, 1, 1};  // a head and the next row share an LSE
    expect_refused(a, "lse: sizes [1, 2, 4] with strides [8, 1, 1] address some elements more than once");
  }
}

TEST(OutputMemory, AnOutputOverlappingAnInputIsRefused) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const auto& [input, name] : {std::pair{0, "q"}, {1, "k"}, {2, "v"}}) {
    Arena a(seed);
    a.args.o = a.at(input);  // in place
    expect_refused(a, std::string("o: its memory overlaps ") + name + "'s");
    Arena shifted(seed);
    shifted.args.o.data = &shifted.memory[static_cast<std::size_t>((input + 1) * kH * kS * kD - 1)];  // one element
    expect_refused(shifted, std::string("o: its memory overlaps ") + name + "'s");
  }
  {
    Arena a(seed);
    a.args.lse.data = static_cast<float*>(a.at(2).data) + 5;  // inside v
    expect_refused(a, "lse: its memory overlaps v's");
  }
  {
    Arena a(seed);
    a.args.lse.data = static_cast<float*>(a.args.o.data) + 7;  // inside o
    expect_refused(a, "lse: its memory overlaps o's");
  }
  {
    Arena a(seed);
    // Room for o's bytes too, though nothing may be written there.
    std::vector<std::uint8_t> visible(static_cast<std::size_t>(kH * kS * kD) * sizeof(float), 1);
    a.args.mask = MaskView{visible.data(), MaskKind::boolean, DType::f32, {1, 1, kS, kS}, {0, 0, kS, 1}};
    a.args.o.data = visible.data();  // the mask's bytes are the output's
    const std::vector<std::uint8_t> mask_before = visible;
    expect_error([&] { attention(a.args); }, "o: its memory overlaps attn_mask's");
    EXPECT_EQ(visible, mask_before);
  }
  {
    // Device tensors: the same check, before the GPU is asked anything (it runs without one).
    Arena a(seed);
    for (TensorView* t : {&a.args.q, &a.args.k, &a.args.v, &a.args.o}) t->device = Device::cuda;
    a.args.lse = LseView{};
    a.args.o.dtype = a.args.q.dtype = a.args.k.dtype = a.args.v.dtype = DType::f16;
    a.args.o.data = a.args.q.data;
    expect_refused(a, "o: its memory overlaps q's");
  }
  {
    // Neighbours in one buffer (q, k, v, o in consecutive slots) share no byte: accepted.
    Arena a(seed);
    attention(a.args);
  }
}

TEST(OutputMemory, APlanRunRefusesNewPointersThatOverlap) {
  Arena a(test::fresh_seed());
  const AttentionPlan plan(a.args);
  AttentionArgs call = a.args;
  call.o.data = call.k.data;
  const std::vector<float> before = a.memory;
  expect_error([&] { plan.run(call, nullptr); }, "o: its memory overlaps k's");
  EXPECT_EQ(before, a.memory);
}

TEST(OutputMemory, VarlenRefusesAnOutputOverlappingItsInputs) {
  std::vector<float> q(6 * kH * kD, 0.5f), kv(6 * kH * kD, 0.25f);
  std::vector<std::int32_t> cu = {0, 2, 6};
  VarlenArgs a;
  a.q = packed_view(q.data(), DType::f32, 6, kH, kD);
  a.k = a.v = packed_view(kv.data(), DType::f32, 6, kH, kD);
  a.o = packed_view(kv.data(), DType::f32, 6, kH, kD);
  a.cu_seqlens_q = a.cu_seqlens_k = cu.data();
  a.batch = 2;
  a.max_seqlen_q = a.max_seqlen_k = 4;
  const std::vector<float> before = kv;
  expect_error([&] { attention_varlen(a); }, "o: its memory overlaps k's");
  EXPECT_EQ(kv, before);
}

// A paged cache of 4 blocks of 4 positions, one sequence of 2 positions appending 1.
struct SmallCache {
  std::vector<float> k_cache, v_cache, q, o, k, v, lse;
  std::vector<std::int32_t> lens = {2}, table = {2, 0};
  KVCacheArgs args;
  SmallCache()
      : k_cache(4 * kH * 4 * kD, 0.5f), v_cache(k_cache.size(), 0.25f), q(kH * kD, 0.125f), o(q.size()),
        k(kH * kD, 1.0f), v(kH * kD, -1.0f), lse(kH) {
    args.k_cache = bhsd_view(k_cache.data(), DType::f32, 4, kH, 4, kD);
    args.v_cache = bhsd_view(v_cache.data(), DType::f32, 4, kH, 4, kD);
    args.q = bhsd_view(q.data(), DType::f32, 1, kH, 1, kD);
    args.o = bhsd_view(o.data(), DType::f32, 1, kH, 1, kD);
    args.k = bhsd_view(k.data(), DType::f32, 1, kH, 1, kD);
    args.v = bhsd_view(v.data(), DType::f32, 1, kH, 1, kD);
    args.lse = lse_view(lse.data(), 1, kH, 1);
    args.cache_seqlens = lens.data();
    args.block_table = table.data();
    args.max_blocks = 2;
  }
  // attention_with_kvcache and its plan refuse the call, and neither cache changed (no append ran).
  void expect_refused(const std::string& needle) {
    const std::vector<float> kc = k_cache, vc = v_cache;
    expect_error([&] { attention_with_kvcache(args); }, needle);
    expect_error([&] { KVCachePlan{args}; }, needle);
    EXPECT_EQ(kc, k_cache) << needle;
    EXPECT_EQ(vc, v_cache) << needle;
  }
};

TEST(OutputMemory, TheKvCacheApiRefusesAnOutputOverlappingTheCachesOrTheNewKeys) {
  {
    SmallCache c;
    c.args.o.data = &c.k_cache[3 * kH * 4 * kD];  // block 3: a block no sequence uses, still the cache
    c.expect_refused("o: its memory overlaps k_cache's");
  }
  {
    SmallCache c;
    c.args.o.data = c.v_cache.data();
    c.expect_refused("o: its memory overlaps v_cache's");
  }
  {
    SmallCache c;
    c.args.o = c.args.v;
    c.expect_refused("o: its memory overlaps v's");
  }
  {
    SmallCache c;
    c.args.o = c.args.q;
    c.expect_refused("o: its memory overlaps q's");
  }
  {
    SmallCache c;
    c.args.lse.data = &c.k_cache[1];
    c.expect_refused("lse: its memory overlaps k_cache's");
  }
  {
    SmallCache c;
    c.args.o.stride[1] = 4;  // the second head starts in the middle of the first
    c.expect_refused("o: sizes [1, 2, 1, 8] with strides [16, 4, 8, 1] address some elements more than once");
  }
  {
    SmallCache c;
    c.args.k.data = &c.k_cache[5];  // new keys read from where the append writes
    c.expect_refused("k_cache: its memory overlaps k's");
  }
  {
    SmallCache c;  // the same call with its own memory runs
    attention_with_kvcache(c.args);
    EXPECT_EQ(c.k_cache[static_cast<std::size_t>(((2 * kH + 0) * 4 + 2) * kD)], 1.0f);  // block 2, slot 2
  }
}

// The index arrays are read while the outputs (and an append) are written: an output over one of them
// would change the offsets, lengths or block ids under the call. Each is placed inside an output's
// memory (as int32 values there) and the call is refused before anything is written.
TEST(OutputMemory, OutputsAndAppendsStayApartFromTheIndexArrays) {
  {
    std::vector<float> q(6 * kH * kD, 0.5f), kv(6 * kH * kD, 0.25f), o(6 * kH * kD, 0.0f);
    const std::int32_t offsets[3] = {0, 2, 6};
    auto* cu = reinterpret_cast<std::int32_t*>(&o[kD]);
    std::memcpy(cu, offsets, sizeof offsets);
    VarlenArgs a;
    a.q = packed_view(q.data(), DType::f32, 6, kH, kD);
    a.k = a.v = packed_view(kv.data(), DType::f32, 6, kH, kD);
    a.o = packed_view(o.data(), DType::f32, 6, kH, kD);
    a.cu_seqlens_q = cu;
    a.cu_seqlens_k = offsets;
    a.batch = 2;
    a.max_seqlen_q = a.max_seqlen_k = 4;
    const std::vector<float> before = o;
    expect_error([&] { attention_varlen(a); }, "o: its memory overlaps cu_seqlens_q's");
    EXPECT_EQ(std::memcmp(o.data(), before.data(), o.size() * sizeof(float)), 0);
  }
  {
    SmallCache c;
    const std::int32_t length = 2;
    std::memcpy(c.o.data(), &length, sizeof length);
    c.args.cache_seqlens = reinterpret_cast<const std::int32_t*>(c.o.data());
    c.expect_refused("o: its memory overlaps cache_seqlens's");
  }
  {
    SmallCache c;  // the block table in block 3 of k_cache: within the byte range the append writes into
    std::int32_t* table = reinterpret_cast<std::int32_t*>(&c.k_cache[3 * kH * 4 * kD]);
    std::memcpy(table, c.table.data(), c.table.size() * sizeof(std::int32_t));
    c.args.block_table = table;
    c.expect_refused("k_cache: its memory overlaps block_table's");
  }
}

TEST(OutputMemory, AnAppendRefusesCachesThatShareElementsButTakesTheHalvesOfOneBuffer) {
  {
    SmallCache c;  // v_cache one row into k_cache: the new values would land on keys
    c.args.v_cache.data = &c.k_cache[kD];
    c.expect_refused("v_cache: shares elements with k_cache");
  }
  // One pool [blocks, 2, H, positions, D]: k_cache the first half of each block, v_cache the second.
  SmallCache c;
  std::vector<float> pool(2 * c.k_cache.size(), 0.5f);
  const std::int64_t half = kH * 4 * kD;
  for (TensorView* cache : {&c.args.k_cache, &c.args.v_cache}) {
    cache->data = pool.data() + (cache == &c.args.v_cache ? half : 0);
    cache->stride[0] = 2 * half;
  }
  attention_with_kvcache(c.args);
  EXPECT_EQ(pool[static_cast<std::size_t>(2 * 2 * half + 2 * kD)], 1.0f);         // block 2, slot 2: k
  EXPECT_EQ(pool[static_cast<std::size_t>(2 * 2 * half + half + 2 * kD)], -1.0f);  // ... and v
}

TEST(OutputMemory, MergeRefusesAnOutputWhoseIndicesShareElements) {
  float oa[4] = {1, 2, 3, 4}, ob[4] = {5, 6, 7, 8}, om[4] = {9, 9, 9, 9}, la[2] = {0, 0}, lb[2] = {0, 0},
        lm[2] = {9, 9};
  const auto a = bhsd_view(oa, DType::f32, 1, 1, 2, 2), b = bhsd_view(ob, DType::f32, 1, 1, 2, 2);
  TensorView o = bhsd_view(om, DType::f32, 1, 1, 2, 2);
  o.stride[2] = 1;  // row 1 starts inside row 0
  expect_error([&] { merge_partials(a, lse_view(la, 1, 1, 2), b, lse_view(lb, 1, 1, 2), o, lse_view(lm, 1, 1, 2)); },
               "o: sizes [1, 1, 2, 2] with strides [4, 4, 1, 1] address some elements more than once");
  EXPECT_EQ(om[0], 9.0f);
  EXPECT_EQ(lm[0], 9.0f);
  // o one row into o_a: row 0 of o would be written over row 1 of o_a before that is read.
  float pool[6] = {1, 2, 3, 4, 0, 0};
  const auto shifted_a = bhsd_view(pool, DType::f32, 1, 1, 2, 2);
  expect_error([&] { merge_partials(shifted_a, lse_view(la, 1, 1, 2), b, lse_view(lb, 1, 1, 2),
                                    bhsd_view(pool + 2, DType::f32, 1, 1, 2, 2), lse_view(lm, 1, 1, 2)); },
               "o: its memory overlaps o_a's");
  EXPECT_EQ(pool[2], 3.0f);
  // In place (o is o_a, element by element) stays allowed, whatever the strides of size-1 dimensions.
  TensorView in_place = a;
  in_place.stride[1] = 1;
  merge_partials(a, lse_view(la, 1, 1, 2), b, lse_view(lb, 1, 1, 2), in_place, lse_view(la, 1, 1, 2));
  EXPECT_FLOAT_EQ(oa[0], 3.0f);
}

TEST(OutputMemory, MergeTakesLseOfPartialsOnly) {
  float oa[4] = {1, 2, 3, 4}, ob[4] = {5, 6, 7, 8}, om[4] = {9, 9, 9, 9}, lm[2] = {9, 9};
  const auto a = bhsd_view(oa, DType::f32, 1, 1, 2, 2), b = bhsd_view(ob, DType::f32, 1, 1, 2, 2);
  const auto o = bhsd_view(om, DType::f32, 1, 1, 2, 2);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    float la[2] = {0, bad}, lb[2] = {0, 0};
    expect_error([&] { merge_partials(a, lse_view(la, 1, 1, 2), b, lse_view(lb, 1, 1, 2), o, lse_view(lm, 1, 1, 2)); },
                 "lse_a: ");
    EXPECT_EQ(om[0], 9.0f);  // nothing written
  }
  // A part without keys (LSE -inf) weighs nothing, whatever its O holds.
  float la[2] = {-std::numeric_limits<float>::infinity(), 0}, lb[2] = {0, 0};
  oa[0] = std::numeric_limits<float>::quiet_NaN();
  merge_partials(a, lse_view(la, 1, 1, 2), b, lse_view(lb, 1, 1, 2), o, lse_view(lm, 1, 1, 2));
  EXPECT_EQ(om[0], 5.0f);
  EXPECT_EQ(om[1], 6.0f);
  EXPECT_EQ(lm[0], 0.0f);
}

TEST(OutputMemory, TheSelfOverlapRuleAcceptsPermutationsAndSlices) {
  const std::int64_t shape[] = {2, 3, 5, 7};
  for (const auto& strides : {std::array<std::int64_t, 4>{105, 35, 7, 1}, {1, 2, 6, 30}, {210, 7, 21, 1},
                              {1000, 100, 10, 1}}) {
    EXPECT_NO_THROW(check_no_self_overlap({nullptr, 4, shape, strides}, "o")) << strides[0];
  }
  EXPECT_THROW(check_no_self_overlap({nullptr, 4, shape, std::array<std::int64_t, 4>{105, 35, 6, 1}}, "o"),
               Error);  // sequence stride 6 < the 7 head-dim elements
  const std::int64_t ones[] = {1, 1, 1, 5};
  EXPECT_NO_THROW(check_no_self_overlap({nullptr, 4, ones, std::array<std::int64_t, 4>{0, 0, 0, 1}}, "o"));
}

}  // namespace
}  // namespace pasa
