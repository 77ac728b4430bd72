// SPDX-License-Identifier: Apache-2.0
// The serving layouts (pasa/serving.h): every sequence of a varlen or KV-cache call must give, bit for
// bit, what pasa::attention gives on that sequence alone as a dense problem, under every preset; and
// bad batches must be rejected before anything (output or cache) is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "memory_budget.h"
#include "pasa/error.h"
#include "pasa/serving.h"
#include "test_util.h"

namespace pasa {
namespace {

using test::expect_error;
using test::Tensor4;

constexpr std::int64_t kHq = 4, kHkv = 2, kD = 32;

// Copies rows [s0, s0 + len) of t[b] into a new contiguous [1, H, len, D] tensor of t's dtype.
Tensor4 copy_rows(const TensorView& t, std::int64_t b, std::int64_t s0, std::int64_t len) {
  Tensor4 out = test::make_tensor(1, t.heads(), len, t.dim(), t.dtype);
  for (std::int64_t h = 0; h < t.heads(); ++h)
    for (std::int64_t s = 0; s < len; ++s)
      for (std::int64_t d = 0; d < t.dim(); ++d)
        store_from_double(out.view.data, t.dtype, out.view.offset(0, h, s, d),
                          load_as_float(t.data, t.dtype, t.offset(b, h, s0 + s, d)));
  return out;
}

// Expects rows [s0, s0 + len) of (o[b], lse[b]) to equal the dense run's output bit for bit; an empty
// key set must give O = 0 and LSE = -inf.
void expect_sequence_equal(const AttentionArgs& options, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& o, const LseView& lse,
                           std::int64_t b, std::int64_t s0, std::int64_t len) {
  if (len == 0) return;
  Tensor4 want_o = test::make_tensor(1, q.heads(), len, q.dim(), o.dtype);
  std::vector<float> want_lse(static_cast<std::size_t>(q.heads() * len),
                              -std::numeric_limits<float>::infinity());
  if (k.seq() > 0) {
    AttentionArgs dense = options;
    dense.stats = nullptr;
    dense.q = q;
    dense.k = k;
    dense.v = v;
    dense.o = want_o.view;
    dense.lse = lse_view(want_lse.data(), 1, q.heads(), len);
    attention(dense);
  }
  for (std::int64_t h = 0; h < q.heads(); ++h) {
    for (std::int64_t s = 0; s < len; ++s) {
      for (std::int64_t d = 0; d < q.dim(); ++d) {
        const float got = load_as_float(o.data, o.dtype, o.offset(b, h, s0 + s, d));
        const float want = load_as_float(want_o.view.data, o.dtype, want_o.view.offset(0, h, s, d));
        ASSERT_TRUE(std::memcmp(&got, &want, sizeof got) == 0)
            << "o[" << b << ", " << h << ", " << s0 + s << ", " << d << "] = " << got << ", dense "
            << want;
      }
      const float got = lse.data[b * lse.stride[0] + h * lse.stride[1] + (s0 + s) * lse.stride[2]];
      const float want = want_lse[static_cast<std::size_t>(h * len + s)];
      ASSERT_TRUE(std::memcmp(&got, &want, sizeof got) == 0)
          << "lse[" << b << ", " << h << ", " << s0 + s << "] = " << got << ", dense " << want;
    }
  }
}

// A packed batch: lengths per sequence; q/k/v/o packed [total, H, D] (bshd views of batch one).
struct Varlen {
  std::vector<std::int32_t> cu_q{0}, cu_k{0};
  Tensor4 q, k, v, o;
  std::vector<float> lse;
  VarlenArgs args;
  Varlen(const std::vector<std::pair<int, int>>& lengths, std::uint64_t seed, DType dtype = DType::f16) {
    std::int64_t max_q = 0, max_k = 0;
    for (auto [nq, nk] : lengths) {
      cu_q.push_back(cu_q.back() + nq);
      cu_k.push_back(cu_k.back() + nk);
      max_q = std::max<std::int64_t>(max_q, nq);
      max_k = std::max<std::int64_t>(max_k, nk);
    }
    std::mt19937_64 rng(seed);
    const std::int64_t tq = cu_q.back() + 3, tk = cu_k.back() + 2;  // padding tokens past the end
    q = test::random_tensor(1, kHq, tq, kD, rng, dtype, true);
    k = test::random_tensor(1, kHkv, tk, kD, rng, dtype, true);
    v = test::random_tensor(1, kHkv, tk, kD, rng, dtype, true);
    o = test::make_tensor(1, kHq, tq, kD, DType::f32, true);
    test::poison(o);
    lse.assign(static_cast<std::size_t>(kHq * tq), std::nanf(""));
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.o = o.view;
    args.lse = lse_view(lse.data(), 1, kHq, tq);
    args.cu_seqlens_q = cu_q.data();
    args.cu_seqlens_k = cu_k.data();
    args.batch = static_cast<std::int64_t>(lengths.size());
    args.max_seqlen_q = max_q;
    args.max_seqlen_k = max_k;
  }
  void expect_equal_to_dense() const {
    for (std::int64_t b = 0; b < args.batch; ++b) {
      const std::int64_t nq = cu_q[b + 1] - cu_q[b], nk = cu_k[b + 1] - cu_k[b];
      SCOPED_TRACE(::testing::Message() << "sequence " << b << " (" << nq << " queries, " << nk << " keys)");
      expect_sequence_equal(args.options, copy_rows(q.view, 0, cu_q[b], nq).view,
                            copy_rows(k.view, 0, cu_k[b], nk).view, copy_rows(v.view, 0, cu_k[b], nk).view,
                            o.view, args.lse, 0, cu_q[b], nq);
    }
  }
};

TEST(Varlen, EachSequenceEqualsTheDenseProblemUnderEveryPreset) {
  // Empty query and key sets, S_q > S_kv (rows fully masked under causal), one token, lengths that
  // are not multiples of any block size.
  const std::vector<std::pair<int, int>> lengths{{5, 9}, {0, 3}, {17, 17}, {4, 0}, {1, 70}, {9, 4}};
  for (const std::string& preset : preset_names()) {
    for (bool causal : {false, true}) {
      const auto seed = test::fresh_seed();
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << preset << " causal " << causal);
      Varlen batch(lengths, seed);
      batch.args.options.policy = preset_policy(preset);
      batch.args.options.causal = causal;
      AttentionStats stats;
      batch.args.options.stats = &stats;
      attention_varlen(batch.args);
      batch.expect_equal_to_dense();
      EXPECT_EQ(stats.rows, kHq * (5 + 17 + 4 + 1 + 9));
      // Padding tokens past cu_seqlens_q[B] are not written.
      const std::int64_t last = batch.cu_q.back();
      for (std::int64_t s = last; s < batch.o.view.seq(); ++s) {
        EXPECT_TRUE(std::isnan(load_as_float(batch.o.view.data, DType::f32, batch.o.view.offset(0, 0, s, 0))));
      }
    }
  }
}

TEST(Varlen, TopLeftAlignmentAndAnExplicitScaleReachEachSequence) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Varlen batch({{7, 3}, {2, 11}}, seed, DType::bf16);
  batch.args.options.causal = true;
  batch.args.options.alignment = CausalAlignment::top_left;
  batch.args.options.scale = 0.3;
  attention_varlen(batch.args);
  batch.expect_equal_to_dense();
}

// A paged cache of kBlocks blocks of kBlockSize positions, filled with random values, in flash-attn's
// [num_blocks, block_size, H_kv, D] layout (bshd views).
constexpr std::int64_t kBlocks = 12, kBlockSize = 4;

struct Cache {
  Tensor4 q, k_cache, v_cache, k_new, v_new, o;
  std::vector<float> lse;
  std::vector<std::int32_t> seqlens, table;
  KVCacheArgs args;
  Cache(std::int64_t B, std::int64_t S_q, std::int64_t blocks, std::int64_t block_size, std::int64_t S_new,
        std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    q = test::random_tensor(B, kHq, S_q, kD, rng, DType::f16);
    k_cache = test::random_tensor(blocks, kHkv, block_size, kD, rng, DType::f16, true);
    v_cache = test::random_tensor(blocks, kHkv, block_size, kD, rng, DType::f16, true);
    o = test::make_tensor(B, kHq, S_q, kD, DType::f32);
    test::poison(o);
    lse.assign(static_cast<std::size_t>(B * kHq * S_q), std::nanf(""));
    args.q = q.view;
    args.k_cache = k_cache.view;
    args.v_cache = v_cache.view;
    args.o = o.view;
    args.lse = lse_view(lse.data(), B, kHq, S_q);
    if (S_new > 0) {
      k_new = test::random_tensor(B, kHkv, S_new, kD, rng, DType::f16, true);
      v_new = test::random_tensor(B, kHkv, S_new, kD, rng, DType::f16, true);
      args.k = k_new.view;
      args.v = v_new.view;
    }
  }
  void set_table(std::vector<std::int32_t> lens, std::vector<std::int32_t> ids, std::int64_t max_blocks) {
    seqlens = std::move(lens);
    table = std::move(ids);
    args.cache_seqlens = seqlens.data();
    args.block_table = table.empty() ? nullptr : table.data();
    args.max_blocks = max_blocks;
  }
  std::int64_t block(std::int64_t b, std::int64_t p) const {
    return table.empty() ? b : table[b * args.max_blocks + p / k_cache.view.seq()];
  }
  // Sequence b's first len positions of a cache (as it is now) as a dense [1, H_kv, len, D] tensor.
  Tensor4 gather(const Tensor4& cache, std::int64_t b, std::int64_t len) const {
    Tensor4 out = test::make_tensor(1, kHkv, len, kD, DType::f16);
    const std::int64_t bs = cache.view.seq();
    for (std::int64_t p = 0; p < len; ++p)
      for (std::int64_t h = 0; h < kHkv; ++h)
        for (std::int64_t d = 0; d < kD; ++d)
          store_from_double(out.view.data, DType::f16, out.view.offset(0, h, p, d),
                            load_as_float(cache.view.data, DType::f16,
                                          cache.view.offset(block(b, p), h, p % bs, d)));
    return out;
  }
  void expect_equal_to_dense() const {
    const std::int64_t s_new = args.k.data ? args.k.seq() : 0;
    for (std::int64_t b = 0; b < q.view.batch(); ++b) {
      const std::int64_t len = seqlens[b] + s_new;
      SCOPED_TRACE(::testing::Message() << "sequence " << b << " (" << len << " keys)");
      expect_sequence_equal(args.options, copy_rows(q.view, b, 0, q.view.seq()).view,
                            gather(k_cache, b, len).view, gather(v_cache, b, len).view, o.view, args.lse,
                            b, 0, q.view.seq());
    }
  }
};

// Whether every element of a cache position row equals the new key row (the append landed there).
bool row_equals(const TensorView& cache, std::int64_t block, std::int64_t slot, const TensorView& src,
                std::int64_t b, std::int64_t i) {
  for (std::int64_t h = 0; h < kHkv; ++h)
    for (std::int64_t d = 0; d < kD; ++d)
      if (load_as_float(cache.data, cache.dtype, cache.offset(block, h, slot, d)) !=
          load_as_float(src.data, src.dtype, src.offset(b, h, i, d)))
        return false;
  return true;
}

TEST(KVCache, PagedShuffledAndSharedBlocksEqualTheDenseProblemUnderEveryPreset) {
  // Three sequences, max_blocks 4, shuffled ids; sequences 0 and 1 share block 7 (a full prefix
  // block). Lengths 6, 9, 0 are not multiples of the block size; sequence 2 has no keys at all.
  for (const std::string& preset : preset_names()) {
    for (bool causal : {false, true}) {
      const auto seed = test::fresh_seed();
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << preset << " causal " << causal);
      Cache c(3, 3, kBlocks, kBlockSize, 0, seed);
      c.set_table({6, 9, 0}, {7, 2, -1, -1, 7, 11, 0, -1, 99, 99, 99, 99}, 4);
      c.args.options.policy = preset_policy(preset);
      c.args.options.causal = causal;
      attention_with_kvcache(c.args);
      c.expect_equal_to_dense();
    }
  }
}

// KVCachePlan on host tensors: made once, its runs equal attention_with_kvcache's on new lengths and
// block ids, and a call of another problem is refused, naming the field, before anything is written.
TEST(KVCache, APlanRunsEachStepAndRefusesAnotherProblem) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  Cache c(2, 1, kBlocks, kBlockSize, 1, seed);
  c.set_table({5, 2}, {0, 1, -1, 2, -1, -1}, 3);
  c.args.options.causal = true;
  const KVCachePlan plan(c.args);
  EXPECT_EQ(plan.workspace_bytes(), 0u);
  plan.run(c.args);
  c.expect_equal_to_dense();
  c.set_table({6, 3}, {0, 1, -1, 2, -1, -1}, 3);  // the next decode step: each sequence one longer
  plan.run(c.args);
  c.expect_equal_to_dense();

  const auto refused = [&](KVCacheArgs other, const char* field) {
    SCOPED_TRACE(field);
    const std::vector<std::uint8_t> cache_before = c.k_cache.bytes, o_before = c.o.bytes;
    test::expect_error([&] { plan.run(other); }, std::string(field) + ": differs from the problem");
    EXPECT_TRUE(c.k_cache.bytes == cache_before && c.o.bytes == o_before);
  };
  KVCacheArgs other = c.args;
  other.options.causal = false;
  refused(other, "causal");
  other = c.args;
  other.max_blocks = 2;
  refused(other, "max_blocks");
  other = c.args;
  other.k = other.v = TensorView{};
  refused(other, "k");
  other = c.args;
  other.options.policy = preset_policy("pasa");
  refused(other, "policy");
}

// A plan refuses what its run() would refuse on the CPU: a head dim past the CPU backends' 1024 was
// planned and refused only at the first step.
TEST(KVCache, APlanRefusesAHeadDimTheCpuCannotRun) {
  std::vector<float> q(2000), o(2000), kv(4 * 2000);
  const std::vector<std::int32_t> lens = {2};
  KVCacheArgs a;
  a.q = bhsd_view(q.data(), DType::f32, 1, 1, 1, 2000);
  a.o = bhsd_view(o.data(), DType::f32, 1, 1, 1, 2000);
  a.k_cache = a.v_cache = bhsd_view(kv.data(), DType::f32, 1, 1, 4, 2000);
  a.cache_seqlens = lens.data();
  expect_error([&] { KVCachePlan{a}; }, "q: head dim 2000 is larger than the CPU backends' 1024");
}

// More new positions than a sequence can hold, whatever the lengths say: refused by the plan too, which
// reads no lengths (the GPU's run then appended only what fit and attended over a truncated cache).
TEST(KVCache, AnAppendLargerThanTheCacheIsRefusedByThePlan) {
  const int D = 64;
  for (const bool paged : {true, false}) {
    SCOPED_TRACE(paged ? "paged, one block of 8" : "dense, 8 positions");
    std::vector<std::uint16_t> q(D, 0x3c00), o(D), k_cache(8 * D), v_cache(8 * D), fresh(16 * D, 0x3c00);
    const std::vector<std::int32_t> lens = {0}, table = {0};
    KVCacheArgs a;
    a.q = bhsd_view(q.data(), DType::f16, 1, 1, 1, D);
    a.o = bhsd_view(o.data(), DType::f16, 1, 1, 1, D);
    a.k_cache = bshd_view(k_cache.data(), DType::f16, 1, 8, 1, D);
    a.v_cache = bshd_view(v_cache.data(), DType::f16, 1, 8, 1, D);
    a.k = a.v = bhsd_view(fresh.data(), DType::f16, 1, 1, 16, D);
    a.cache_seqlens = lens.data();
    if (paged) {
      a.block_table = table.data();
      a.max_blocks = 1;
    }
    expect_error([&] { KVCachePlan{a}; }, "k: 16 new positions (S_new), more than the cache's 8 per sequence");
    expect_error([&] { attention_with_kvcache(a); }, "more than the cache's 8 per sequence");
  }
}

TEST(KVCache, AppendAtTheEndOfAFullBlockThenAttendEqualsTheDenseProblem) {
  for (const char* preset : {"exact", "pasa", "sage8", "fdpp"}) {
    const auto seed = test::fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << preset);
    // Sequence 0 holds 8 = two full blocks: its 3 new positions start block 5. Sequence 1 holds 6
    // (the append crosses from block 3 into block 9); sequence 2 starts empty. Block 1 is a shared
    // full prefix of 0 and 1 that no append touches.
    Cache c(3, 3, kBlocks, kBlockSize, 3, seed);
    c.set_table({8, 6, 0}, {1, 4, 5, -1, 1, 3, 9, -1, 6, -1, -1, -1}, 4);
    const std::vector<std::uint8_t> before = c.k_cache.bytes;
    c.args.options.policy = preset_policy(preset);
    c.args.options.causal = true;
    attention_with_kvcache(c.args);
    c.expect_equal_to_dense();
    for (std::int64_t b = 0; b < 3; ++b) {
      for (std::int64_t i = 0; i < 3; ++i) {
        const std::int64_t p = c.seqlens[b] + i;
        EXPECT_TRUE(row_equals(c.k_cache.view, c.block(b, p), p % kBlockSize, c.k_new.view, b, i));
        EXPECT_TRUE(row_equals(c.v_cache.view, c.block(b, p), p % kBlockSize, c.v_new.view, b, i));
      }
    }
    // Sequence 0's cached positions (blocks 1 and 4) are untouched.
    const std::size_t block_bytes = kBlockSize * kHkv * kD * 2;
    for (int id : {1, 4}) {
      EXPECT_EQ(std::memcmp(c.k_cache.bytes.data() + id * block_bytes, before.data() + id * block_bytes,
                            block_bytes), 0) << "block " << id;
    }
  }
}

TEST(KVCache, DenseCacheWithAppendEqualsTheDenseProblem) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  // Dense [B, S_max, H_kv, D] with S_max 13: sequence 1 fills it exactly with its append.
  Cache c(2, 2, 2, 13, 2, seed);
  c.set_table({5, 11}, {}, 0);
  c.args.options.policy = preset_policy("fa16");
  c.args.options.causal = true;
  attention_with_kvcache(c.args);
  c.expect_equal_to_dense();
  EXPECT_TRUE(row_equals(c.k_cache.view, 1, 12, c.k_new.view, 1, 1));
}

// Runs `call`, expecting an error containing `needle`, and that neither o nor the caches changed.
template <typename F>
void expect_rejected_untouched(Cache& c, F&& call, const std::string& needle) {
  const auto o = c.o.bytes, k = c.k_cache.bytes, v = c.v_cache.bytes;
  expect_error(call, needle);
  EXPECT_TRUE(o == c.o.bytes && k == c.k_cache.bytes && v == c.v_cache.bytes) << needle;
}

TEST(KVCache, BadInputIsRejectedBeforeAnythingIsWritten) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto call = [](Cache& c) { return [&c] { attention_with_kvcache(c.args); }; };
  {
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);
    c.set_table({3, 5}, {0, 1, 2, 3, 12, 5}, 3);  // sequence 1's second block id is 12
    expect_rejected_untouched(c, call(c), "block_table: [1, 1] = 12 is outside [0, 12)");
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);
    c.set_table({3, -1}, {0, 1, 2, 3}, 2);
    expect_rejected_untouched(c, call(c), "cache_seqlens: [1] = -1 is negative");
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);  // 7 + 2 > 2 blocks of 4
    c.set_table({3, 7}, {0, 1, 2, 3}, 2);
    expect_rejected_untouched(c, call(c), "cache_seqlens: sequence 1 holds 7 positions; appending 2 needs 9");
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);  // both append into block 1
    c.set_table({3, 6}, {0, 1, 2, 1}, 2);
    expect_rejected_untouched(c, call(c), "block_table: block 1 is used by sequences");
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);  // sequence 0 holds block 1 twice and appends into it
    c.set_table({3, 2}, {1, 1, 2, 3}, 2);
    expect_rejected_untouched(c, call(c), "block_table: block 1 is at [0, 0] and [0, 1]");
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);
    c.set_table({3, 6}, {0, 1, 2, 3}, 2);
    store_from_double(c.v_cache.bytes.data(), DType::f16, c.v_cache.view.offset(3, 1, 1, 4), INFINITY);
    expect_rejected_untouched(c, call(c), "v_cache: non-finite value at [block, head, slot, dim] = [3, 1, 1, 4]");
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 0, seed);  // a dense cache needs B rows
    c.set_table({3, 6}, {}, 0);
    expect_rejected_untouched(c, call(c), "k_cache: a dense cache (no block_table) needs one row per sequence");
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);
    c.set_table({3, 6}, {0, 1, 2, 3}, 2);
    c.args.v.data = nullptr;
    expect_rejected_untouched(c, call(c), "k/v: give both");
  }
  {
    // New keys are read like the dense API's inputs: a negative stride is refused, not read before
    // the buffer.
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);
    c.set_table({3, 6}, {0, 1, 2, 3}, 2);
    c.args.k.stride[2] = -1;
    expect_rejected_untouched(c, call(c), "k: stride of the sequence dimension is -1 (must be non-negative)");
  }
  {
    // The same tensor as both caches: the append wrote the values over the keys.
    Cache c(2, 1, kBlocks, kBlockSize, 2, seed);
    c.set_table({3, 6}, {0, 1, 2, 3}, 2);
    c.args.v_cache = c.args.k_cache;
    expect_rejected_untouched(c, call(c), "v_cache: is k_cache (the same memory)");
  }
}

// max_blocks is only the table's row length: one so large that max_blocks * block_size passes 2^63
// once wrapped negative and refused every sequence ("more than the cache's -4 per sequence").
TEST(KVCache, AHugeTableRowLengthIsRefusedBeforeAnythingIsWritten) {
  // A row of more than 2^31 int32 ids: at batch 2 the second row's address passed 2^63 bytes (a
  // crash, or at 2^62 the first row read again).
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const std::int64_t max_blocks : {std::int64_t{1} << 31, std::numeric_limits<std::int64_t>::max() / 2}) {
    Cache c(1, 1, kBlocks, kBlockSize, 2, seed);
    c.set_table({3}, {4, 7}, max_blocks);
    const auto before = c.k_cache.bytes;
    expect_error([&] { attention_with_kvcache(c.args); }, "block tables of int32 ids take rows of at most 2^31 - 1");
    EXPECT_TRUE(before == c.k_cache.bytes);
  }
}

// One mask cannot follow the sequences' lengths: refused before anything is written. (Each sequence
// once checked it in turn, so a first sequence without keys, or one whose length matched the mask,
// was written before the second failed.)
TEST(Serving, AMaskIsRefusedBeforeAnythingIsWritten) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  {
    Varlen b({{3, 0}, {4, 4}}, seed);
    std::vector<std::uint8_t> keep(static_cast<std::size_t>(b.q.view.seq() * b.k.view.seq()), 1);
    b.args.options.mask = MaskView{keep.data(), MaskKind::boolean, DType::f32,
                                   {1, 1, b.q.view.seq(), b.k.view.seq()}, {0, 0, b.k.view.seq(), 1}};
    const auto o = b.o.bytes;
    expect_error([&] { attention_varlen(b.args); }, "attn_mask: attention_varlen takes no mask");
    EXPECT_TRUE(o == b.o.bytes);
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 0, seed);
    c.set_table({4, 3}, {0, 1, 2, 3}, 2);  // sequence 0's length is the mask's key size, 1's is not
    std::vector<std::uint8_t> keep(kBlockSize, 1);
    c.args.options.mask = MaskView{keep.data(), MaskKind::boolean, DType::f32, {1, 1, 1, kBlockSize}, {0, 0, 0, 1}};
    expect_rejected_untouched(c, [&] { attention_with_kvcache(c.args); },
                              "attn_mask: attention_with_kvcache takes no mask");
    expect_error([&] { KVCachePlan{c.args}; }, "attn_mask: attention_with_kvcache takes no mask");
  }
}

// PASA's shift matrix M depends on the call's scale (scale=k: alpha M), and a tiny scale makes it
// singular: refused before anything is written, though the emulator checks it in a sequence's turn (a
// first sequence without keys, or the append, would be written before it).
TEST(Serving, AShiftTheScaleMakesSingularIsRefusedBeforeAnythingIsWritten) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  {
    Varlen b({{3, 0}, {4, 4}}, seed);
    b.args.options.policy = preset_policy("pasa");
    b.args.options.scale = 1e-8;
    const auto o = b.o.bytes;
    expect_error([&] { attention_varlen(b.args); }, "scale: 1e-08 is below");
    EXPECT_TRUE(o == b.o.bytes);
  }
  {
    Cache c(2, 1, kBlocks, kBlockSize, 1, seed);
    c.set_table({4, 3}, {0, 1, 2, 3}, 2);
    c.args.options.policy = preset_policy("pasa");
    c.args.options.scale = 1e-8;
    expect_rejected_untouched(c, [&] { attention_with_kvcache(c.args); }, "scale: 1e-08 is below");
    expect_error([&] { KVCachePlan{c.args}; }, "scale: 1e-08 is below");  // (a plan made it to its first run)
  }
}

// A value past the policy's input format (fp16 under fa16) in a later sequence is refused before the
// first sequence is written: the emulator's own check ran per sequence, after earlier ones were.
TEST(Serving, InputsBeyondTheInputFormatAreRefusedBeforeAnythingIsWritten) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  {
    Varlen b({{3, 3}, {4, 4}}, seed, DType::f32);
    b.args.options.policy = preset_policy("fa16");
    store_from_double(b.k.bytes.data(), DType::f32, b.k.view.offset(0, 1, 4, 2), 1e6);
    const auto o = b.o.bytes;
    expect_error([&] { attention_varlen(b.args); }, "k: value 1e+06 at [token, head, dim] = [4, 1, 2] overflows fp16");
    EXPECT_TRUE(o == b.o.bytes);
  }
  {
    std::mt19937_64 rng(seed);
    Tensor4 q = test::random_tensor(2, kHq, 1, kD, rng, DType::f16);
    Tensor4 k_cache = test::random_tensor(2, kHkv, 5, kD, rng, DType::bf16);
    Tensor4 v_cache = test::random_tensor(2, kHkv, 5, kD, rng, DType::bf16);
    Tensor4 o = test::make_tensor(2, kHq, 1, kD, DType::f32);
    test::poison(o);
    store_from_double(v_cache.bytes.data(), DType::bf16, v_cache.view.offset(1, 0, 2, 5), 1048576.0);
    const std::vector<std::int32_t> lens = {3, 3};
    KVCacheArgs a;
    a.q = q.view;
    a.o = o.view;
    a.k_cache = k_cache.view;
    a.v_cache = v_cache.view;
    a.cache_seqlens = lens.data();
    a.options.policy = preset_policy("fa16");
    const auto before = o.bytes;
    expect_error([&] { attention_with_kvcache(a); },
                 "v_cache: value 1.04858e+06 at [block, head, slot, dim] = [1, 0, 2, 5] overflows fp16");
    EXPECT_TRUE(before == o.bytes);
  }
}

// Device tensors take the GPU path, whose host copies of the index arrays are sized by batch and
// max_blocks: sizes past memory are pasa errors (std::bad_alloc escaped), raised before any device call,
// so this runs without a GPU (the data pointers are never read).
TEST(Serving, HugeIndexArraysOfTheGpuPathAreErrors) {
  std::vector<std::uint16_t> q(8 * 2 * 4), o(q.size()), kv(8 * 4);
  std::vector<std::int32_t> cu = {0, 8}, lens = {3};
  VarlenArgs a;
  a.q = packed_view(q.data(), DType::f16, 8, 2, 4, Device::cuda);
  a.o = packed_view(o.data(), DType::f16, 8, 2, 4, Device::cuda);
  a.k = a.v = packed_view(kv.data(), DType::f16, 8, 1, 4, Device::cuda);
  a.cu_seqlens_q = a.cu_seqlens_k = cu.data();
  a.batch = std::int64_t{1} << 60;
  a.max_seqlen_q = a.max_seqlen_k = 8;
  if (available_memory_bytes()) {
    EXPECT_THROW(attention_varlen(a), ResourceError);
  }
  KVCacheArgs c;
  c.q = bhsd_view(q.data(), DType::f16, 1, 2, 1, 4, Device::cuda);
  c.o = bhsd_view(o.data(), DType::f16, 1, 2, 1, 4, Device::cuda);
  c.k_cache = c.v_cache = bhsd_view(kv.data(), DType::f16, 4, 1, 2, 4, Device::cuda);
  c.cache_seqlens = lens.data();
  c.block_table = lens.data();
  c.max_blocks = std::int64_t{1} << 60;
  expect_error([&] { attention_with_kvcache(c); }, "max_blocks: 1152921504606846976; block tables of int32 ids");
}

TEST(Varlen, BadInputIsRejectedBeforeAnythingIsWritten) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto expect_untouched = [](Varlen& b, const std::string& needle) {
    const auto o = b.o.bytes;
    expect_error([&] { attention_varlen(b.args); }, needle);
    EXPECT_TRUE(o == b.o.bytes) << needle;
  };
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.cu_q[1] = 5;  // 0, 5, 7 is fine; make it decrease
    b.cu_q[2] = 4;
    b.args.max_seqlen_q = 10;
    expect_untouched(b, "cu_seqlens_q: decreases: cu_seqlens_q[1] = 5 > cu_seqlens_q[2] = 4");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.cu_k[2] = 100;
    b.args.max_seqlen_k = 100;
    expect_untouched(b, "cu_seqlens_k: cu_seqlens_k[2] = 100 is past the end of the 9 packed tokens");
    // (with a max_seqlen_k that the overlong sequence exceeds too, the offset is named, not the maximum)
    b.args.max_seqlen_k = 4;
    expect_untouched(b, "cu_seqlens_k: cu_seqlens_k[2] = 100 is past the end of the 9 packed tokens");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.args.max_seqlen_q = 3;
    expect_untouched(b, "max_seqlen_q: 3 is less than sequence 1's length 4");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.args.cu_seqlens_k = nullptr;
    expect_untouched(b, "cu_seqlens_k: pointer is null");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    store_from_double(b.k.bytes.data(), DType::f16, b.k.view.offset(0, 1, 5, 2), NAN);
    expect_untouched(b, "k: non-finite value at [token, head, dim] = [5, 1, 2]");  // [token, head, dim] of packed k
  }
  {
    // The index names the packed token, also when the sequences start past token 0.
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.cu_q[0] = 1;
    store_from_double(b.q.bytes.data(), DType::f16, b.q.view.offset(0, 2, 2, 7), NAN);
    expect_untouched(b, "q: non-finite value at [token, head, dim] = [2, 2, 7]");
  }
  {
    // A NaN in a padding token past cu_seqlens_k[B] is never read, so it is no error.
    Varlen b({{3, 3}, {4, 4}}, seed);
    store_from_double(b.k.bytes.data(), DType::f16, b.k.view.offset(0, 0, 8, 0), NAN);
    attention_varlen(b.args);
    b.expect_equal_to_dense();
  }
}

// The packed tensors are the caller's [total, H, D] arrays: messages give their shapes, strides and
// indices in that form, not as the [1, H, total, D] views packed_view makes of them.
TEST(Varlen, ErrorsNameThePackedShapes) {
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  {
    Varlen b({{3, 3}, {4, 4}}, seed);  // 10 query and 9 key tokens, padding included
    b.args.v.shape[2] = 8;
    expect_error([&] { attention_varlen(b.args); }, "v: shape [8, 2, 32] differs from k's [9, 2, 32]");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.args.o.shape[2] = 9;
    expect_error([&] { attention_varlen(b.args); }, "o: shape [9, 4, 32] differs from q's [10, 4, 32]");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.args.o.stride[2] = 16;  // tokens half a row apart: their rows interleave
    expect_error([&] { attention_varlen(b.args); },
                 "o: sizes [10, 4, 32] with strides [16, 32, 1] address some elements more than once");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.args.lse.shape[2] = 9;
    expect_error([&] { attention_varlen(b.args); }, "lse: shape [1, 4, 9] is not [1, H_q, total_q] = [1, 4, 10]");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.args.k.shape[1] = b.args.v.shape[1] = 0;
    expect_error([&] { attention_varlen(b.args); }, "k: heads size is 0");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed);
    b.args.q.shape[0] = 2;
    expect_error([&] { attention_varlen(b.args); }, "q: batch size 2; a packed tensor [total, H, D] is one batch");
  }
  {
    Varlen b({{3, 3}, {4, 4}}, seed, DType::f32);
    b.args.options.policy = preset_policy("fa16");
    store_from_double(b.q.bytes.data(), DType::f32, b.q.view.offset(0, 3, 6, 1), 1e6);
    expect_error([&] { attention_varlen(b.args); }, "q: value 1e+06 at [token, head, dim] = [6, 3, 1] overflows fp16");
  }
}

// A batch without tokens, or without keys, is valid (flash-attn takes them): empty tensors (no data
// pointer needed) give an empty output, and query rows without keys O = 0, LSE = -inf.
TEST(Varlen, EmptyBatchesAreValid) {
  const std::vector<std::int32_t> zeros(3, 0), cu_q = {0, 2, 5};
  std::vector<float> q(5 * kHq * kD, 0.5f), o(q.size(), NAN), lse(5 * kHq, NAN);
  VarlenArgs a;
  a.batch = 2;
  a.q = packed_view(nullptr, DType::f32, 0, kHq, kD);
  a.k = a.v = packed_view(nullptr, DType::f32, 0, kHkv, kD);
  a.o = packed_view(nullptr, DType::f32, 0, kHq, kD);
  a.lse = lse_view(nullptr, 1, kHq, 0);
  a.cu_seqlens_q = a.cu_seqlens_k = zeros.data();
  AttentionStats stats;
  a.options.stats = &stats;
  attention_varlen(a);  // no tokens at all
  EXPECT_EQ(stats.rows, 0);
  for (const std::string& preset : preset_names()) {
    SCOPED_TRACE(preset);
    a.options.policy = preset_policy(preset);
    a.q = packed_view(q.data(), DType::f32, 5, kHq, kD);
    a.o = packed_view(o.data(), DType::f32, 5, kHq, kD);
    a.lse = lse_view(lse.data(), 1, kHq, 5);
    a.cu_seqlens_q = cu_q.data();
    a.max_seqlen_q = 3;
    attention_varlen(a);  // queries without keys
    EXPECT_EQ(stats.rows, 5 * kHq);
    for (const float x : o) EXPECT_EQ(x, 0.0f);
    for (const float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  }
  // Keys without queries: nothing to write.
  std::vector<float> kv(4 * kHkv * kD, 0.25f);
  a.q = packed_view(nullptr, DType::f32, 0, kHq, kD);
  a.o = packed_view(nullptr, DType::f32, 0, kHq, kD);
  a.lse = lse_view(nullptr, 1, kHq, 0);
  a.k = a.v = packed_view(kv.data(), DType::f32, 4, kHkv, kD);
  const std::vector<std::int32_t> cu_k = {0, 1, 4};
  a.cu_seqlens_q = zeros.data();
  a.cu_seqlens_k = cu_k.data();
  a.max_seqlen_k = 3;
  attention_varlen(a);
  EXPECT_EQ(stats.rows, 0);
  // Shapes must still agree, and a sequence still fit the tokens there are.
  a.v = packed_view(nullptr, DType::f32, 0, kHkv, kD);
  expect_error([&] { attention_varlen(a); }, "v: shape [0, 2, 32] differs from k's [4, 2, 32]");
  a.k = a.v;
  expect_error([&] { attention_varlen(a); },
               "cu_seqlens_k: cu_seqlens_k[1] = 1 is past the end of the 0 packed tokens");
}

}  // namespace
}  // namespace pasa
