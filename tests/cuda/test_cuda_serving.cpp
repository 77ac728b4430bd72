// SPDX-License-Identifier: Apache-2.0
// The serving layouts on the GPU (pasa/serving.h with device tensors): attention_with_kvcache (the
// split-KV decode kernel reading a paged or dense cache in place, after its append kernel) and
// attention_varlen (each sequence as the dense GPU call), each against the CPU emulator's run of the
// very same call on host copies: tests/cpu/test_serving.cpp shows that run equals the dense problem
// of each sequence bit for bit, so it is the oracle here. Without a GPU of compute capability 8.0 or
// newer every test is skipped.
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>

#include "cuda/host/decode_params.h"
#include "cuda/host/device_pool.h"
#include "cuda_case_harness.h"
#include "pasa/serving.h"

namespace pasa {
namespace {

constexpr std::int64_t kHq = 8, kHkv = 2;  // GQA: four query heads per K/V head

// A view of t's own bytes: a copied Tensor4's view still points at the original's.
TensorView at(Tensor4& t) {
  TensorView v = t.view;
  v.data = t.bytes.data();
  return v;
}

bool is_neg_inf(float x) { return std::isinf(x) && x < 0; }

// What one call left behind: O in [B, H, S, D] order, the LSE [B, H, S] and the caches' bytes.
struct Outcome {
  std::vector<double> o;
  std::vector<float> lse;
  std::vector<std::uint8_t> k_cache, v_cache;
};

// How far the GPU may be from the emulator running the same policy, from the formats alone (inputs
// lie in [-1, 1], so |V| <= 1). Each side rounds P (and fdpp S) to a format of unit roundoff u, each
// relative to its own maximum (the kernel's per split, the emulator's over all keys): that moves each
// side's normalized weights by at most 2u of themselves, so O by at most 2u, and l by u, so the LSE by
// u: 4u and 2u between the sides (the LSE's 3u leaves room for fdpp's rounding of S). Each side rounds
// O to the output format once; fp32 accumulation and the split merge are the small atol.
struct Tolerance {
  double o, lse;
};

Tolerance tolerance(const Policy& pol, DType in, DType out, double max_abs_o) {
  const double u = std::max({format_of(in).epsilon(), pol.p.epsilon(), pol.s.epsilon()}) / 2;
  const double u_out = (out == DType::f32 ? Format::fp32() : format_of(out)).epsilon() / 2;
  return {4 * u + 2 * u_out * max_abs_o + 1e-5, 3 * u + 1e-3};
}

// Expects the GPU's rows within tolerance of the emulator's; a row the emulator masks fully (LSE
// -inf) must be exactly O = 0, LSE = -inf on the GPU too, and no other row may be.
void expect_close(const Outcome& gpu, const Outcome& emu, std::int64_t D, const Policy& pol, DType in,
                  DType out) {
  ASSERT_EQ(gpu.o.size(), emu.o.size());
  ASSERT_EQ(gpu.lse.size(), emu.lse.size());
  double max_abs_o = 0;
  for (double x : emu.o) max_abs_o = std::max(max_abs_o, std::abs(x));
  const Tolerance tol = tolerance(pol, in, out, max_abs_o);
  std::size_t masked_wrong = 0, worst_o_at = 0, worst_lse_at = 0;
  double worst_o = 0, worst_lse = 0;
  const double inf = std::numeric_limits<double>::infinity();
  for (std::size_t r = 0; r < emu.lse.size(); ++r) {
    const float want = emu.lse[r], got = gpu.lse[r];
    if (is_neg_inf(want)) {
      masked_wrong += !is_neg_inf(got);
      for (std::int64_t d = 0; d < D; ++d) masked_wrong += gpu.o[r * D + d] != 0.0;
      continue;
    }
    const double lse_diff = std::isfinite(got) ? std::abs(double{got} - want) : inf;
    if (!(lse_diff <= worst_lse)) {
      worst_lse = lse_diff;
      worst_lse_at = r;
    }
    for (std::int64_t d = 0; d < D; ++d) {
      const std::size_t i = r * D + d;
      const double diff = std::isfinite(gpu.o[i]) ? std::abs(gpu.o[i] - emu.o[i]) : inf;
      if (!(diff <= worst_o)) {
        worst_o = diff;
        worst_o_at = i;
      }
    }
  }
  EXPECT_EQ(masked_wrong, 0u) << "rows the emulator masks fully must be O = 0, LSE = -inf on the GPU "
                                 "(and only those)";
  EXPECT_LE(worst_o, tol.o) << "O: |GPU - emulator| at element " << worst_o_at << " (GPU "
                            << gpu.o[worst_o_at] << ", emulator " << emu.o[worst_o_at] << ")";
  EXPECT_LE(worst_lse, tol.lse) << "LSE: |GPU - emulator| at row " << worst_lse_at << " (GPU "
                                << gpu.lse[worst_lse_at] << ", emulator " << emu.lse[worst_lse_at] << ")";
}

// Expects each of `rows` (indices into the LSE, D elements of O each) to be exactly O = 0, LSE = -inf.
void expect_fully_masked(const Outcome& out, const std::vector<std::size_t>& rows, std::int64_t D) {
  for (std::size_t r : rows) {
    EXPECT_TRUE(is_neg_inf(out.lse[r])) << "row " << r << ": LSE " << out.lse[r] << ", want -inf";
    for (std::int64_t d = 0; d < D; ++d) {
      ASSERT_EQ(out.o[r * D + d], 0.0) << "row " << r << " has no key: O must be 0";
    }
  }
}

// Expects the call to throw a pasa::Error whose message contains every needle.
template <typename F>
void expect_error_naming(F&& call, std::initializer_list<const char*> needles) {
  try {
    call();
    ADD_FAILURE() << "expected a pasa::Error naming " << *needles.begin();
  } catch (const Error& e) {
    for (const char* needle : needles) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "message: " << e.what() << "\nexpected to contain: " << needle;
    }
  }
}

// A created stream for the calls (options.stream), destroyed with the test.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { cudaStreamCreate(&s); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// ------------------------------------------------------------------------------------------------
// attention_with_kvcache

// One KV-cache call's host inputs. The cache has rows of block_size positions in flash-attn's
// [rows, block_size, H_kv, D] memory (bshd; bhsd for a dense cache where asked); new keys and values
// when S_new > 0 (k_new.bytes empty: no append).
struct KVProblem {
  Tensor4 q, k_cache, v_cache, k_new, v_new;
  std::vector<std::int32_t> seqlens, table;  // table empty: a dense cache
  std::int64_t max_blocks = 0;
  DType in = DType::f16, out = DType::f32;
  bool bshd = false;  // q's and o's layout
  AttentionArgs options;

  std::int64_t batch() const { return q.view.batch(); }
  std::int64_t seq_q() const { return q.view.seq(); }
  std::int64_t dim() const { return q.view.dim(); }
  std::int64_t rows() const { return batch() * kHq * seq_q(); }
  bool appends() const { return !k_new.bytes.empty(); }
};

// Random inputs in [-1, 1].
KVProblem make_kv(std::int64_t B, std::int64_t S_q, std::int64_t D, std::int64_t cache_rows,
                  std::int64_t block_size, std::int64_t S_new, DType in, DType out, bool bshd,
                  std::mt19937_64& rng, bool cache_bshd = true, std::int64_t heads_kv = kHkv) {
  KVProblem p;
  p.q = test::random_tensor(B, kHq, S_q, D, rng, in, bshd);
  p.k_cache = test::random_tensor(cache_rows, heads_kv, block_size, D, rng, in, cache_bshd);
  p.v_cache = test::random_tensor(cache_rows, heads_kv, block_size, D, rng, in, cache_bshd);
  if (S_new > 0) {
    p.k_new = test::random_tensor(B, heads_kv, S_new, D, rng, in, true);
    p.v_new = test::random_tensor(B, heads_kv, S_new, D, rng, in, true);
  }
  p.in = in;
  p.out = out;
  p.bshd = bshd;
  return p;
}

// A block table [lengths.size(), max_blocks]: sequence b's first ceil(lengths[b] / block_size) entries
// drawn from a shuffled list of the ids, the first `shared` of sequence 1 equal to sequence 0's (a
// common prefix: those blocks must be full in both and appended to by neither), the rest -1.
std::vector<std::int32_t> shuffled_table(const std::vector<std::int64_t>& lengths, std::int64_t block_size,
                                         std::int64_t max_blocks, std::int64_t num_blocks, std::int64_t shared,
                                         std::mt19937_64& rng) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::int32_t> table(lengths.size() * static_cast<std::size_t>(max_blocks), -1);
  std::size_t next = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    for (std::int64_t i = 0; i < (lengths[b] + block_size - 1) / block_size; ++i) {
      table[b * max_blocks + i] = b == 1 && i < shared ? table[i] : ids.at(next++);
    }
  }
  return table;
}

// Sets p's lengths and a fresh shuffled table for them (the appended positions included).
void set_paged(KVProblem& p, std::vector<std::int32_t> lengths, std::int64_t max_blocks, std::int64_t shared,
               std::mt19937_64& rng) {
  const std::int64_t s_new = p.appends() ? p.k_new.view.seq() : 0;
  std::vector<std::int64_t> used;
  for (std::int32_t len : lengths) used.push_back(len + s_new);
  p.table = shuffled_table(used, p.k_cache.view.seq(), max_blocks, p.k_cache.view.batch(), shared, rng);
  p.seqlens = std::move(lengths);
  p.max_blocks = max_blocks;
}

KVCacheArgs kv_args(const KVProblem& p, const TensorView& q, const TensorView& k_cache,
                    const TensorView& v_cache, const TensorView* k, const TensorView* v, const TensorView& o,
                    const LseView& lse, const std::int32_t* seqlens, const std::int32_t* table) {
  KVCacheArgs a;
  a.q = q;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  if (k != nullptr) {
    a.k = *k;
    a.v = *v;
  }
  a.o = o;
  a.lse = lse;
  a.cache_seqlens = seqlens;
  a.block_table = p.table.empty() ? nullptr : table;
  a.max_blocks = p.table.empty() ? 0 : p.max_blocks;
  a.options = p.options;
  return a;
}

// The emulator's run of the call on host copies (p by value: its caches take the append).
Outcome run_on_host(KVProblem p) {
  Tensor4 o = test::make_tensor(p.batch(), kHq, p.seq_q(), p.dim(), p.out, p.bshd);
  test::poison(o);
  std::vector<float> lse(static_cast<std::size_t>(p.rows()), std::nanf(""));
  const TensorView k = at(p.k_new), v = at(p.v_new);
  attention_with_kvcache(kv_args(p, at(p.q), at(p.k_cache), at(p.v_cache), p.appends() ? &k : nullptr, &v,
                                 o.view, lse_view(lse.data(), p.batch(), kHq, p.seq_q()), p.seqlens.data(),
                                 p.table.data()));
  return {test::read_bhsd(o.view), lse, p.k_cache.bytes, p.v_cache.bytes};
}

// A call's O (through o_host, which has its shape and layout) and LSE, downloaded.
Outcome download_outputs(DeviceTensor& o, Tensor4& o_host, const DeviceBuffer& lse) {
  Outcome out;
  o.copy_to(o_host);
  out.o = test::read_bhsd(o_host.view);
  out.lse.resize(lse.bytes / sizeof(float));
  cudaMemcpy(out.lse.data(), lse.ptr, lse.bytes, cudaMemcpyDeviceToHost);
  return out;
}

// Device copies of a problem's tensors and index arrays, and its outputs (poisoned: all-ones bytes,
// NaN in every dtype).
struct DeviceKV {
  DeviceTensor q, k_cache, v_cache;
  std::unique_ptr<DeviceTensor> k_new, v_new;
  Tensor4 o_host;  // the output's shape and layout; downloads land in its bytes
  DeviceTensor o;
  DeviceBuffer lse, seqlens, table;

  explicit DeviceKV(const KVProblem& p)
      : q(p.q), k_cache(p.k_cache), v_cache(p.v_cache),
        o_host(test::make_tensor(p.batch(), kHq, p.seq_q(), p.dim(), p.out, p.bshd)), o(o_host),
        lse(static_cast<std::size_t>(p.rows()) * sizeof(float)),
        seqlens(p.seqlens.size() * sizeof(std::int32_t)),
        table(std::max<std::size_t>(p.table.size(), 1) * sizeof(std::int32_t)) {
    if (p.appends()) {
      k_new = std::make_unique<DeviceTensor>(p.k_new);
      v_new = std::make_unique<DeviceTensor>(p.v_new);
    }
    upload_indices(p);
    poison();
  }
  void upload_indices(const KVProblem& p) {
    cudaMemcpy(seqlens.ptr, p.seqlens.data(), p.seqlens.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice);
    if (!p.table.empty()) {
      cudaMemcpy(table.ptr, p.table.data(), p.table.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice);
    }
  }
  void poison() {
    o.poison();
    cudaMemset(lse.ptr, 0xff, lse.bytes);
  }
  KVCacheArgs args(const KVProblem& p, cudaStream_t stream) const {
    KVCacheArgs a = kv_args(p, q.view, k_cache.view, v_cache.view, k_new ? &k_new->view : nullptr,
                            v_new ? &v_new->view : nullptr, o.view,
                            lse_view(static_cast<float*>(lse.ptr), p.batch(), kHq, p.seq_q(), Device::cuda),
                            static_cast<const std::int32_t*>(seqlens.ptr),
                            static_cast<const std::int32_t*>(table.ptr));
    a.options.stream = stream;
    return a;
  }
  Outcome download() {
    Outcome out = download_outputs(o, o_host, lse);
    out.k_cache = k_cache.download();
    out.v_cache = v_cache.download();
    return out;
  }
};

Outcome run_on_device(const KVProblem& p) {
  DeviceKV d(p);
  Stream stream;
  attention_with_kvcache(d.args(p, stream.s));
  const cudaError_t sync = cudaStreamSynchronize(stream.s);
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  return d.download();
}

// fn() captured on `stream` into a CUDA graph (returned in `graph`) and instantiated; nullptr, with the
// test failed, where fn threw while capturing (the capture ended and its graph dropped).
template <typename Fn>
cudaGraphExec_t capture_graph(cudaStream_t stream, cudaGraph_t& graph, Fn&& fn) {
  graph = nullptr;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    fn();
  } catch (const Error& e) {
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    graph = nullptr;
    ADD_FAILURE() << "capturing the call threw: " << e.what();
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  return exec;
}

// The GPU's O and LSE within tolerance of the emulator's, and the caches after the call (the append
// included) equal to the emulator's bit for bit. Returns the GPU's outcome.
Outcome expect_matches_emulator(const KVProblem& p) {
  Outcome gpu = run_on_device(p);
  const Outcome emu = run_on_host(p);
  expect_close(gpu, emu, p.dim(), p.options.policy, p.in, p.out);
  EXPECT_TRUE(gpu.k_cache == emu.k_cache) << "k_cache after the call differs from the emulator's";
  EXPECT_TRUE(gpu.v_cache == emu.v_cache) << "v_cache after the call differs from the emulator's";
  return gpu;
}

// Sequence b's rows of a [B, H_q, S_q] LSE.
std::vector<std::size_t> rows_of(const KVProblem& p, std::int64_t b) {
  std::vector<std::size_t> rows;
  for (std::int64_t h = 0; h < kHq; ++h) {
    for (std::int64_t s = 0; s < p.seq_q(); ++s) {
      rows.push_back(static_cast<std::size_t>((b * kHq + h) * p.seq_q() + s));
    }
  }
  return rows;
}

std::string describe(const KVProblem& p) {
  return "B" + std::to_string(p.batch()) + " Sq" + std::to_string(p.seq_q()) + " D" + std::to_string(p.dim()) +
         " block " + std::to_string(p.k_cache.view.seq()) + (p.table.empty() ? " dense" : " paged") +
         " S_new " + std::to_string(p.appends() ? p.k_new.view.seq() : 0) + " in " + dtype_name(p.in) +
         " out " + dtype_name(p.out) + (p.options.causal ? " causal" : "") + " policy " +
         to_string(p.options.policy);
}

// A paged cache: block size, ids, table row length, blocks shared by sequences 0 and 1, the lengths
// cached (sequence 2 holds nothing).
struct PagedLayout {
  std::int64_t block_size, num_blocks, max_blocks, shared;
  std::vector<std::int32_t> lengths;
};

TEST(CudaKVCacheDecode, PagedShuffledSharedBlocksMatchTheEmulator) {
  REQUIRE_GPU();
  // Lengths that are not multiples of the block size; the last layout spans many splits and pages.
  const PagedLayout layouts[] = {{16, 12, 4, 1, {37, 21, 0}},
                                 {64, 12, 4, 1, {150, 70, 0}},
                                 {64, 28, 16, 3, {1000, 700, 0}}};
  for (const PagedLayout& l : layouts) {
    for (const std::int64_t D : {128, 64}) {
      for (const std::int64_t S_q : {1, 4}) {
        for (const bool causal : {false, true}) {
          for (const DType in : {DType::f16, DType::bf16}) {
            if (l.max_blocks > 4 && D != 128) continue;  // the long layout once per other setting
            const auto seed = test::fresh_seed();
            std::mt19937_64 rng(seed);
            KVProblem p = make_kv(3, S_q, D, l.num_blocks, l.block_size, 0, in, causal ? DType::f32 : in,
                                  D == 64, rng);
            set_paged(p, l.lengths, l.max_blocks, l.shared, rng);
            // The preset as users pass it (the kernel still rounds P to the input dtype: within the
            // tolerance) and the exact policy as the kernel runs it.
            p.options.policy = D == 64 ? preset_policy("exact") : exact_policy(in);
            p.options.causal = causal;
            SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(p));
            const Outcome gpu = expect_matches_emulator(p);
            expect_fully_masked(gpu, rows_of(p, 2), D);  // sequence 2 has no key
          }
        }
      }
    }
  }
}

TEST(CudaKVCacheDecode, PagedCacheOfOneSequenceMatchesTheEmulator) {
  REQUIRE_GPU();
  // One sequence (its view's batch dimension has size 1, where the block stride must still step a
  // block) over shuffled blocks, with one and two K/V heads, with and without an append.
  for (const std::int64_t heads_kv : {2, 1}) {
    for (const std::int64_t bs : {16, 64}) {
      for (const std::int64_t S_new : {0, 3}) {
        for (const std::int64_t D : {128, 64}) {
          const DType in = D == 128 ? DType::bf16 : DType::f16;
          const auto seed = test::fresh_seed();
          std::mt19937_64 rng(seed);
          KVProblem p = make_kv(1, S_new > 0 ? S_new : 1, D, 12, bs, S_new, in, in, false, rng, true, heads_kv);
          set_paged(p, {static_cast<std::int32_t>(3 * bs - 5)}, 6, 0, rng);
          p.options.policy = exact_policy(in);
          p.options.causal = true;
          SCOPED_TRACE(::testing::Message() << "seed " << seed << " H_kv " << heads_kv << " " << describe(p));
          expect_matches_emulator(p);
        }
      }
    }
  }
}

TEST(CudaKVCacheDecode, AppendThenAttendMatchesTheEmulatorAndWritesTheSameCache) {
  REQUIRE_GPU();
  // Sequence 0 holds one full block: its append starts the next one. Sequence 1 holds two positions
  // short of two blocks (three new ones cross into a third) and shares sequence 0's first block.
  // Sequence 2 starts empty: it attends to its new keys only.
  for (const std::int64_t bs : {16, 64}) {
    for (const std::int64_t S_new : {1, 3}) {
      for (const std::int64_t D : {128, 64}) {
        for (const bool causal : {false, true}) {
          for (const DType in : {DType::f16, DType::bf16}) {
            const auto seed = test::fresh_seed();
            std::mt19937_64 rng(seed);
            KVProblem p = make_kv(3, S_new, D, 12, bs, S_new, in, causal ? in : DType::f32, D == 128, rng);
            set_paged(p, {static_cast<std::int32_t>(bs), static_cast<std::int32_t>(2 * bs - 2), 0}, 4, 1, rng);
            p.options.policy = exact_policy(in);
            p.options.causal = causal;
            SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(p));
            expect_matches_emulator(p);
          }
        }
      }
    }
  }
}

TEST(CudaKVCacheDecode, DenseCacheWithAppendMatchesTheEmulator) {
  REQUIRE_GPU();
  // [B, H_kv, S_max, D] with S_max 40, in flash-attn's memory and in BHSD: sequence 1's append fills
  // its row exactly.
  for (const bool cache_bshd : {true, false}) {
    for (const bool causal : {false, true}) {
      for (const DType in : {DType::f16, DType::bf16}) {
        const auto seed = test::fresh_seed();
        std::mt19937_64 rng(seed);
        KVProblem p = make_kv(2, 3, 128, 2, 40, 3, in, in, !cache_bshd, rng, cache_bshd);
        p.seqlens = {5, 37};
        p.options.policy = exact_policy(in);
        p.options.causal = causal;
        SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(p) << " cache "
                                          << (cache_bshd ? "bshd" : "bhsd"));
        expect_matches_emulator(p);
      }
    }
  }
}

// A cache call whose size-1 dimensions have stride 1 (DLPack from torch before 2.9 exports them so:
// CudaPlan.SizeOneDimensionsRunWithAnyStride) gives the bits of the call on dense strides: batch 1, one
// query, one appended position, on a dense cache and on a paged cache of one block.
TEST(CudaKVCacheDecode, SizeOneDimensionsRunWithAnyStride) {
  REQUIRE_GPU();
  for (const bool paged : {false, true}) {
    const auto seed = test::fresh_seed();
    std::mt19937_64 rng(seed);
    KVProblem p = make_kv(1, 1, 128, 1, 64, 1, DType::f16, DType::f16, false, rng);
    if (paged) {
      set_paged(p, {40}, 1, 0, rng);
    } else {
      p.seqlens = {40};
    }
    p.options.policy = exact_policy(DType::f16);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(p));
    const Outcome dense = run_on_device(p);
    DeviceKV d(p);
    Stream stream;
    KVCacheArgs a = d.args(p, stream.s);
    for (TensorView* t : {&a.q, &a.k_cache, &a.v_cache, &a.k, &a.v, &a.o}) *t = with_size_one_strides_of_one(*t);
    ASSERT_NE(a.k_cache.stride, d.k_cache.view.stride);
    attention_with_kvcache(a);
    ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
    const Outcome unit = d.download();
    EXPECT_TRUE(unit.o == dense.o) << "O differs from the call on dense strides";
    EXPECT_TRUE(unit.lse == dense.lse) << "the LSE differs";
    EXPECT_TRUE(unit.k_cache == dense.k_cache && unit.v_cache == dense.v_cache) << "the caches differ";
  }
}

// A dense cache far longer than its sequences (a server's cache sized for its longest request): the
// plan's many splits (chosen for the capacity) cut each sequence's own length, the full capacity, a
// length that is no multiple of a tile, one shorter than the splits' tiles and none at all.
TEST(CudaKVCacheDecode, DenseCacheFarLongerThanItsSequencesMatchesTheEmulator) {
  REQUIRE_GPU();
  for (const std::int64_t S_q : {1, 4}) {
    for (const bool causal : {false, true}) {
      for (const DType in : {DType::f16, DType::bf16}) {
        for (const bool fdpp : {false, true}) {
          if (fdpp && (S_q != 1 || causal)) continue;
          const auto seed = test::fresh_seed();
          std::mt19937_64 rng(seed);
          KVProblem p = make_kv(4, S_q, 128, 4, 8192, 0, in, DType::f32, false, rng);
          p.seqlens = {8192, 4100, 65, 0};
          p.options.policy = fdpp ? preset_policy("fdpp") : exact_policy(in);
          p.options.causal = causal;
          SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(p));
          const Outcome gpu = expect_matches_emulator(p);
          expect_fully_masked(gpu, rows_of(p, 3), 128);  // sequence 3 has no key
        }
      }
    }
  }
}

// An eager call on a cache far longer than its sequences merges in its last splits, its capture into
// a CUDA graph in the merge kernel: the same bits of O and LSE, with the many splits that hold no key
// of the short sequences (m = -inf partials) and a sequence without keys.
TEST(CudaKVCacheGraph, ACapturedCallGivesTheEagerBitsWithEmptySplits) {
  REQUIRE_GPU();
  for (const std::int64_t D : {64, 128}) {
    for (const char* policy : {"exact", "fdpp"}) {
      const auto seed = test::fresh_seed();
      std::mt19937_64 rng(seed);
      KVProblem p = make_kv(4, 1, D, 4, 4096, 0, DType::f16, DType::f16, false, rng);
      p.seqlens = {4096, 300, 0, 1000};
      p.options.policy = std::string(policy) == "exact" ? exact_policy(DType::f16) : preset_policy(policy);
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(p));
      DeviceKV d(p);
      Stream stream;
      const KVCacheArgs args = d.args(p, stream.s);
      attention_with_kvcache(args);
      cuda_ok(cudaStreamSynchronize(stream.s), "eager call");
      const Outcome eager = d.download();
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = capture_graph(stream.s, graph, [&] { attention_with_kvcache(args); });
      ASSERT_NE(exec, nullptr);
      d.poison();
      cuda_ok(cudaGraphLaunch(exec, stream.s), "cudaGraphLaunch");
      cuda_ok(cudaStreamSynchronize(stream.s), "graph replay");
      const Outcome replayed = d.download();
      const auto bits = [](const std::vector<double>& x) {
        std::vector<std::uint64_t> b(x.size());
        std::memcpy(b.data(), x.data(), x.size() * sizeof(double));
        return b;
      };
      EXPECT_EQ(bits(replayed.o), bits(eager.o)) << "O of the replay differs from the eager call's";
      EXPECT_EQ(std::memcmp(replayed.lse.data(), eager.lse.data(), eager.lse.size() * sizeof(float)), 0)
          << "LSE of the replay differs from the eager call's";
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
}

// FlashDecoding++'s unified maximum on a paged cache, with and without an append, short and long.
TEST(CudaKVCacheDecode, FdppOnAPagedCacheMatchesTheEmulator) {
  REQUIRE_GPU();
  const PagedLayout layouts[] = {{16, 12, 4, 1, {37, 21, 0}}, {64, 28, 16, 3, {1000, 700, 0}}};
  for (const PagedLayout& l : layouts) {
    for (const std::int64_t S_new : {0, 1}) {
      for (const DType in : {DType::f16, DType::bf16}) {
        const auto seed = test::fresh_seed();
        std::mt19937_64 rng(seed);
        KVProblem p = make_kv(3, 1, 128, l.num_blocks, l.block_size, S_new, in, DType::f32, false, rng);
        set_paged(p, l.lengths, l.max_blocks, l.shared, rng);
        p.options.policy = preset_policy("fdpp");
        SCOPED_TRACE(::testing::Message() << "seed " << seed << " " << describe(p));
        expect_matches_emulator(p);
      }
    }
  }
}

// Expects the device call to throw naming every needle, with the output and LSE still poisoned and
// the caches as uploaded.
void expect_rejected_untouched(const KVProblem& p, std::initializer_list<const char*> needles) {
  DeviceKV d(p);
  Stream stream;
  expect_error_naming([&] { attention_with_kvcache(d.args(p, stream.s)); }, needles);
  cuda_ok(cudaStreamSynchronize(stream.s), "stream after the rejected call");
  const Outcome after = d.download();
  std::size_t written = 0;
  for (double x : after.o) written += !std::isnan(x);
  for (float x : after.lse) written += !std::isnan(x);
  EXPECT_EQ(written, 0u) << "output or LSE elements written by a rejected call";
  EXPECT_TRUE(after.k_cache == p.k_cache.bytes) << "k_cache changed by a rejected call";
  EXPECT_TRUE(after.v_cache == p.v_cache.bytes) << "v_cache changed by a rejected call";
}

TEST(CudaKVCacheBadInput, IndexErrorsAreRejectedBeforeAnythingIsWritten) {
  REQUIRE_GPU();
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  // Two sequences of 37 and 21 positions appending 2 each into 12 blocks of 16, rows of 4 ids;
  // block 3 is their shared first block.
  KVProblem base = make_kv(2, 2, 128, 12, 16, 2, DType::f16, DType::f16, true, rng);
  base.options.policy = exact_policy(DType::f16);
  base.max_blocks = 4;
  base.seqlens = {37, 21};
  base.table = {3, 7, 1, -1, 3, 9, -1, -1};
  {
    KVProblem p = base;
    p.table[5] = 40;  // sequence 1's second block
    expect_rejected_untouched(p, {"block_table", "40"});
  }
  {
    KVProblem p = base;
    p.seqlens[1] = -3;
    expect_rejected_untouched(p, {"cache_seqlens", "-3"});
  }
  {
    KVProblem p = base;  // 63 + 2 positions in four blocks of 16
    p.seqlens[1] = 63;
    p.table = {3, 7, 1, -1, 3, 9, 10, 11};
    expect_rejected_untouched(p, {"cache_seqlens", "63"});
  }
  {
    KVProblem p = base;  // both append into block 1
    p.table[5] = 1;
    expect_rejected_untouched(p, {"block_table"});
  }
}

// The index arrays are device memory on the GPU path: a host array is refused by name before it is
// read (it would be a device-to-host copy from host memory), and nothing is written.
TEST(CudaKVCacheBadInput, HostIndexArraysAreRefusedByName) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::kFixedSeeds[0]);
  KVProblem p = make_kv(2, 2, 128, 12, 16, 2, DType::f16, DType::f16, true, rng);
  p.options.policy = exact_policy(DType::f16);
  p.max_blocks = 4;
  p.seqlens = {37, 21};
  p.table = {3, 7, 1, -1, 4, 9, -1, -1};
  DeviceKV d(p);
  Stream stream;
  KVCacheArgs host_lengths = d.args(p, stream.s);
  host_lengths.cache_seqlens = p.seqlens.data();
  expect_error_naming([&] { attention_with_kvcache(host_lengths); }, {"cache_seqlens", "host memory"});
  KVCacheArgs host_table = d.args(p, stream.s);
  host_table.block_table = p.table.data();
  expect_error_naming([&] { attention_with_kvcache(host_table); }, {"block_table", "host memory"});
  cuda_ok(cudaStreamSynchronize(stream.s), "stream after the rejected calls");
  const Outcome after = d.download();
  std::size_t written = 0;
  for (double x : after.o) written += !std::isnan(x);
  EXPECT_EQ(written, 0u) << "output elements written by a rejected call";
  EXPECT_TRUE(after.k_cache == p.k_cache.bytes) << "k_cache changed by a rejected call";
}

// The decode kernel takes S_q <= 16 and the exact and fdpp policies; anything else is an error before
// any launch (the append included), not a silent fallback.
TEST(CudaKVCacheBadInput, LongQueriesAndPrefillPoliciesAreRejected) {
  REQUIRE_GPU();
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  KVProblem p = make_kv(2, 17, 128, 12, 16, 2, DType::f16, DType::f16, false, rng);
  set_paged(p, {20, 9}, 4, 0, rng);
  p.options.policy = exact_policy(DType::f16);
  expect_rejected_untouched(p, {"S_q"});
  p.options.policy = preset_policy("fdpp");  // (its general refusal speaks of the prefill path)
  expect_rejected_untouched(p, {"which does not run this call", "it takes S_q <= 16 (q has S_q = 17)"});
  KVProblem one = make_kv(2, 1, 128, 12, 16, 2, DType::f16, DType::f16, false, rng);
  set_paged(one, {20, 9}, 4, 0, rng);
  for (const char* preset : {"sage8", "pasa"}) {
    one.options.policy = preset_policy(preset);
    expect_rejected_untouched(one, {preset});
  }
  // Head dim 256 where no decode tile fits (a 99 KiB device, as ctest's env_99kib run makes this one):
  // refused naming the bytes.
  if (!device_grants_shared_memory(cuda::decode_tile_for(256, 1, granted_shared_memory()).smem_bytes(1))) {
    KVProblem wide = make_kv(2, 1, 256, 12, 16, 0, DType::f16, DType::f16, false, rng);
    set_paged(wide, {20, 9}, 4, 0, rng);
    wide.options.policy = exact_policy(DType::f16);
    expect_rejected_untouched(wide, {"split-KV decode kernel", "bytes of shared memory per CTA"});
  }
}

// The plan depends on the cache's capacity only, so a graph captured once replays with new lengths
// (longer than at capture) and new block ids written into the same device arrays.
TEST(CudaKVCacheGraph, ACapturedCallReplaysWithNewLengthsAndBlockIds) {
  REQUIRE_GPU();
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  // One decode step (S_q = S_new = 1) of two sequences in 40 blocks of 16, rows of 16 ids (256
  // positions per sequence).
  KVProblem p = make_kv(2, 1, 128, 40, 16, 1, DType::f16, DType::f16, true, rng);
  set_paged(p, {3, 10}, 16, 0, rng);
  p.options.policy = exact_policy(DType::f16);
  p.options.causal = true;
  DeviceKV d(p);
  Stream stream;
  const KVCacheArgs args = d.args(p, stream.s);
  // A direct call first (it checks the indices, and leaves the pool its workspace).
  attention_with_kvcache(args);
  cuda_ok(cudaStreamSynchronize(stream.s), "direct call");
  Outcome gpu = d.download();
  Outcome emu = run_on_host(p);
  expect_close(gpu, emu, p.dim(), p.options.policy, p.in, p.out);
  ASSERT_TRUE(gpu.k_cache == emu.k_cache && gpu.v_cache == emu.v_cache) << "direct call's append";

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = capture_graph(stream.s, graph, [&] { attention_with_kvcache(args); });
  ASSERT_NE(exec, nullptr);
  for (const std::vector<std::int32_t>& lengths : {std::vector<std::int32_t>{100, 7}, {31, 220}}) {
    SCOPED_TRACE(::testing::Message() << "replay with lengths " << lengths[0] << ", " << lengths[1]);
    p.k_cache.bytes = gpu.k_cache;  // the host copies follow the device's caches
    p.v_cache.bytes = gpu.v_cache;
    set_paged(p, lengths, 16, 0, rng);
    d.upload_indices(p);
    d.poison();
    cuda_ok(cudaGraphLaunch(exec, stream.s), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream.s), "graph replay");
    gpu = d.download();
    emu = run_on_host(p);
    expect_close(gpu, emu, p.dim(), p.options.policy, p.in, p.out);
    EXPECT_TRUE(gpu.k_cache == emu.k_cache) << "k_cache after the replay's append";
    EXPECT_TRUE(gpu.v_cache == emu.v_cache) << "v_cache after the replay's append";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// KVCachePlan: planned once, run on a caller-owned workspace, captured; the graph replays with new
// lengths and block ids, and a call of another problem is refused before anything runs.
TEST(CudaKVCacheGraph, APlanRunCapturedReplaysWithNewLengthsAndBlockIds) {
  REQUIRE_GPU();
  const auto seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  KVProblem p = make_kv(3, 1, 64, 60, 32, 1, DType::bf16, DType::bf16, true, rng);
  set_paged(p, {5, 40, 0}, 32, 0, rng);
  p.options.policy = exact_policy(DType::bf16);
  DeviceKV d(p);
  Stream stream;
  const KVCacheArgs args = d.args(p, stream.s);
  const KVCachePlan plan(args);
  void* workspace = nullptr;
  cuda_ok(cudaMalloc(&workspace, std::max<std::size_t>(plan.workspace_bytes(), 1)), "cudaMalloc (workspace)");
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = capture_graph(stream.s, graph, [&] { plan.run(args, workspace); });
  ASSERT_NE(exec, nullptr);
  Outcome gpu = d.download();
  for (const std::vector<std::int32_t>& lengths : {std::vector<std::int32_t>{5, 40, 0}, {300, 1, 77}}) {
    SCOPED_TRACE(::testing::Message() << "replay with lengths " << lengths[0] << ", " << lengths[1] << ", "
                                      << lengths[2]);
    p.k_cache.bytes = gpu.k_cache;  // the host copies follow the device's caches
    p.v_cache.bytes = gpu.v_cache;
    set_paged(p, lengths, 32, 0, rng);
    d.upload_indices(p);
    d.poison();
    cuda_ok(cudaGraphLaunch(exec, stream.s), "cudaGraphLaunch");
    cuda_ok(cudaStreamSynchronize(stream.s), "graph replay");
    gpu = d.download();
    const Outcome emu = run_on_host(p);
    expect_close(gpu, emu, p.dim(), p.options.policy, p.in, p.out);
    EXPECT_TRUE(gpu.k_cache == emu.k_cache && gpu.v_cache == emu.v_cache) << "the replay's append";
  }
  KVCacheArgs other = args;
  other.options.causal = !other.options.causal;
  expect_error_naming([&] { plan.run(other, workspace); }, {"causal", "differs"});
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(workspace);
}

// ------------------------------------------------------------------------------------------------
// attention_varlen

// A packed batch: (query, key) lengths per sequence, tokens packed [total, H, D] with three query and
// two key tokens of padding past the last sequence.
struct VarlenProblem {
  std::vector<std::int32_t> cu_q{0}, cu_k{0};
  std::int64_t max_q = 0, max_k = 0, total_q = 0, total_k = 0, D = 0;
  Tensor4 q, k, v;  // [1, H, total, D] views of the packed memory
  DType in = DType::f16, out = DType::f32;
  AttentionArgs options;
};

VarlenProblem make_varlen(const std::vector<std::pair<int, int>>& lengths, std::int64_t D, DType in, DType out,
                          std::mt19937_64& rng) {
  VarlenProblem p;
  for (auto [nq, nk] : lengths) {
    p.cu_q.push_back(p.cu_q.back() + nq);
    p.cu_k.push_back(p.cu_k.back() + nk);
    p.max_q = std::max<std::int64_t>(p.max_q, nq);
    p.max_k = std::max<std::int64_t>(p.max_k, nk);
  }
  p.total_q = p.cu_q.back() + 3;
  p.total_k = p.cu_k.back() + 2;
  p.D = D;
  p.q = test::random_tensor(1, kHq, p.total_q, D, rng, in, true);
  p.k = test::random_tensor(1, kHkv, p.total_k, D, rng, in, true);
  p.v = test::random_tensor(1, kHkv, p.total_k, D, rng, in, true);
  p.in = in;
  p.out = out;
  return p;
}

VarlenArgs varlen_args(const VarlenProblem& p, void* q, void* k, void* v, void* o, float* lse,
                       const std::int32_t* cu_q, const std::int32_t* cu_k, Device device) {
  VarlenArgs a;
  a.q = packed_view(q, p.in, p.total_q, kHq, p.D, device);
  a.k = packed_view(k, p.in, p.total_k, kHkv, p.D, device);
  a.v = packed_view(v, p.in, p.total_k, kHkv, p.D, device);
  a.o = packed_view(o, p.out, p.total_q, kHq, p.D, device);
  a.lse = lse_view(lse, 1, kHq, p.total_q, device);
  a.cu_seqlens_q = cu_q;
  a.cu_seqlens_k = cu_k;
  a.batch = static_cast<std::int64_t>(p.cu_q.size()) - 1;
  a.max_seqlen_q = p.max_q;
  a.max_seqlen_k = p.max_k;
  a.options = p.options;
  return a;
}

// The emulator's run of the call on host copies, under `policy`.
Outcome run_varlen_on_host(VarlenProblem p, const Policy& policy) {
  p.options.policy = policy;
  Tensor4 o = test::make_tensor(1, kHq, p.total_q, p.D, p.out, true);
  test::poison(o);
  std::vector<float> lse(static_cast<std::size_t>(kHq * p.total_q), std::nanf(""));
  attention_varlen(varlen_args(p, at(p.q).data, at(p.k).data, at(p.v).data, o.bytes.data(), lse.data(),
                               p.cu_q.data(), p.cu_k.data(), Device::cpu));
  return {test::read_bhsd(o.view), lse, {}, {}};
}

// Device copies of a packed batch, its offsets and its (poisoned) outputs.
struct DeviceVarlen {
  DeviceTensor q, k, v;
  Tensor4 o_host;
  DeviceTensor o;
  DeviceBuffer lse, cu_q, cu_k;
  explicit DeviceVarlen(const VarlenProblem& p)
      : q(p.q), k(p.k), v(p.v), o_host(test::make_tensor(1, kHq, p.total_q, p.D, p.out, true)), o(o_host),
        lse(static_cast<std::size_t>(kHq * p.total_q) * sizeof(float)),
        cu_q(p.cu_q.size() * sizeof(std::int32_t)), cu_k(p.cu_k.size() * sizeof(std::int32_t)) {
    cudaMemcpy(cu_q.ptr, p.cu_q.data(), cu_q.bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(cu_k.ptr, p.cu_k.data(), cu_k.bytes, cudaMemcpyHostToDevice);
    o.poison();
    cudaMemset(lse.ptr, 0xff, lse.bytes);
  }
  VarlenArgs args(const VarlenProblem& p, const Policy& policy, cudaStream_t stream) const {
    VarlenArgs a = varlen_args(p, q.buf.ptr, k.buf.ptr, v.buf.ptr, o.buf.ptr, static_cast<float*>(lse.ptr),
                               static_cast<const std::int32_t*>(cu_q.ptr),
                               static_cast<const std::int32_t*>(cu_k.ptr), Device::cuda);
    a.options.policy = policy;
    a.options.stream = stream;
    return a;
  }
  Outcome download() { return download_outputs(o, o_host, lse); }
};

Outcome run_varlen_on_device(const VarlenProblem& p, const Policy& policy) {
  DeviceVarlen d(p);
  Stream stream;
  attention_varlen(d.args(p, policy, stream.s));
  const cudaError_t sync = cudaStreamSynchronize(stream.s);
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  return d.download();
}

// The rows of the sequences' query tokens (the LSE is [1, H_q, total_q]), and the padding rows past them.
std::vector<std::size_t> varlen_rows(const VarlenProblem& p, std::int64_t from, std::int64_t to) {
  std::vector<std::size_t> rows;
  for (std::int64_t h = 0; h < kHq; ++h)
    for (std::int64_t s = from; s < to; ++s) rows.push_back(static_cast<std::size_t>(h * p.total_q + s));
  return rows;
}

Outcome select_rows(const Outcome& x, const std::vector<std::size_t>& rows, std::int64_t D) {
  Outcome out;
  for (std::size_t r : rows) {
    out.lse.push_back(x.lse[r]);
    out.o.insert(out.o.end(), x.o.begin() + r * D, x.o.begin() + (r + 1) * D);
  }
  return out;
}

// One empty key range first (its rows: O = 0, LSE = -inf), one empty query range; more queries than
// keys in the last (rows fully masked under causal); GQA.
const std::vector<std::pair<int, int>> kVarlenLengths{{6, 0}, {40, 90}, {0, 20}, {12, 5}};

// Checks what holds whatever the policy: the empty key range's rows are O = 0, LSE = -inf exactly,
// and the padding tokens past cu_seqlens_q[B] are not written (still the poison).
void expect_varlen_structure(const VarlenProblem& p, const Outcome& gpu) {
  expect_fully_masked(gpu, varlen_rows(p, p.cu_q[0], p.cu_q[1]), p.D);
  std::size_t written = 0;
  for (std::size_t r : varlen_rows(p, p.cu_q.back(), p.total_q)) {
    written += !std::isnan(gpu.lse[r]);
    for (std::int64_t d = 0; d < p.D; ++d) written += !std::isnan(gpu.o[r * p.D + d]);
  }
  EXPECT_EQ(written, 0u) << "padding tokens past cu_seqlens_q[B] were written";
}

TEST(CudaVarlen, ExactMatchesTheEmulator) {
  REQUIRE_GPU();
  for (const DType in : {DType::f16, DType::bf16}) {
    for (const bool causal : {false, true}) {
      const auto seed = test::fresh_seed();
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " in " << dtype_name(in) << " causal " << causal);
      std::mt19937_64 rng(seed);
      VarlenProblem p = make_varlen(kVarlenLengths, 128, in, causal ? DType::f32 : in, rng);
      p.options.causal = causal;
      const Policy pol = exact_policy(in);
      const Outcome gpu = run_varlen_on_device(p, pol);
      const Outcome emu = run_varlen_on_host(p, pol);
      expect_varlen_structure(p, gpu);
      const std::vector<std::size_t> rows = varlen_rows(p, 0, p.cu_q.back());
      expect_close(select_rows(gpu, rows, p.D), select_rows(emu, rows, p.D), p.D, pol, p.in, p.out);
    }
  }
}

// The offsets are device memory on the GPU path: host ones are refused by name before they are read.
TEST(CudaVarlen, HostOffsetsAreRefusedByName) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::kFixedSeeds[0]);
  const VarlenProblem p = make_varlen(kVarlenLengths, 64, DType::f16, DType::f16, rng);
  DeviceVarlen d(p);
  Stream stream;
  VarlenArgs a = d.args(p, exact_policy(DType::f16), stream.s);
  a.cu_seqlens_k = p.cu_k.data();
  expect_error_naming([&] { attention_varlen(a); }, {"cu_seqlens_k", "host memory"});
}

// A batch whose sequences all lack keys runs no kernel, yet is refused as the same batch with keys
// is (the kernels' dtype, head dim and policy), with nothing written.
TEST(CudaVarlen, SequencesWithoutKeysAreRefusedAsThoseWithKeys) {
  REQUIRE_GPU();
  struct Case {
    DType in;
    std::int64_t D;
    const char* policy;
    const char* needle;
  };
  for (const Case& c : {Case{DType::f32, 64, "exact", "dtype"}, Case{DType::f16, 96, "sage8", "no CUDA kernel"}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.in) << " D " << c.D << " " << c.policy);
    for (const auto& lengths : {std::vector<std::pair<int, int>>{{6, 0}, {3, 0}}, {{6, 0}, {3, 5}}}) {
      std::mt19937_64 rng(test::kFixedSeeds[0]);
      const VarlenProblem p = make_varlen(lengths, c.D, c.in, DType::f32, rng);
      DeviceVarlen d(p);
      Stream stream;
      expect_error_naming([&] { attention_varlen(d.args(p, parse_policy(c.policy), stream.s)); }, {c.needle});
      cuda_ok(cudaStreamSynchronize(stream.s), "stream after the refused call");
      const Outcome after = d.download();
      std::size_t written = 0;
      for (double x : after.o) written += !std::isnan(x);
      EXPECT_EQ(written, 0u) << "output elements written by a refused call";
    }
  }
}

// A packed q whose base is not 16-byte aligned, the first sequence without keys: refused before the
// rows of that sequence are written (they were, and then the next sequence's run refused the call).
TEST(CudaVarlen, AMisalignedOperandIsRefusedBeforeAnyRowIsWritten) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::kFixedSeeds[0]);
  const VarlenProblem p = make_varlen(kVarlenLengths, 64, DType::f16, DType::f16, rng);
  DeviceVarlen d(p);
  Stream stream;
  VarlenArgs a = d.args(p, exact_policy(DType::f16), stream.s);
  a.q.data = static_cast<std::uint8_t*>(a.q.data) + 2;  // (refused before anything reads it)
  expect_error_naming([&] { attention_varlen(a); }, {"q", "aligned"});
  cuda_ok(cudaStreamSynchronize(stream.s), "stream after the refused call");
  const Outcome after = d.download();
  std::size_t written = 0;
  for (double x : after.o) written += !std::isnan(x);
  for (double x : after.lse) written += !std::isnan(x);
  EXPECT_EQ(written, 0u) << "output elements written by a refused call";
}

// An error the caller's own CUDA call left pending is not taken for pasa's: a batch whose first
// sequence has no keys (its rows written by their own kernel) runs and matches the emulator.
TEST(CudaVarlen, ACallersPendingCudaErrorIsNotReportedAsPasas) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::kFixedSeeds[0]);
  const VarlenProblem p = make_varlen(kVarlenLengths, 64, DType::f16, DType::f16, rng);
  const Policy pol = exact_policy(DType::f16);
  DeviceVarlen d(p);
  Stream stream;
  void* huge = nullptr;
  ASSERT_EQ(cudaMalloc(&huge, std::size_t{1} << 62), cudaErrorMemoryAllocation);  // left pending
  attention_varlen(d.args(p, pol, stream.s));
  cuda_ok(cudaStreamSynchronize(stream.s), "stream after the call");
  const Outcome gpu = d.download();
  expect_varlen_structure(p, gpu);
  const std::vector<std::size_t> rows = varlen_rows(p, 0, p.cu_q.back());
  expect_close(select_rows(gpu, rows, p.D), select_rows(run_varlen_on_host(p, pol), rows, p.D), p.D, pol, p.in,
               p.out);
}

// Device memory short of the longest sequence's prepass scratch: a ResourceError before any launch,
// the shorter sequence's rows unwritten too (they were written before the failure), and the device
// usable after it. The pool is trimmed and the rest of the memory taken first, so that what pasa's
// pool kept from earlier tests cannot stand in.
TEST(CudaVarlen, MemoryShortOfTheLongestSequenceWritesNothing) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::kFixedSeeds[0]);
  // pasa on bf16: sequence 1's scratch (K' tiles and V rounded to fp16) is about 100 MiB.
  const VarlenProblem p = make_varlen({{64, 256}, {64, 100000}}, 128, DType::bf16, DType::f16, rng);
  const Policy policy = parse_policy("pasa");
  DeviceVarlen d(p);
  Stream stream;
  int device = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaMemPoolTrimTo(cuda::scratch_pool(device), 0), cudaSuccess);
  std::size_t free_bytes = 0, total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  void* ballast = nullptr;
  ASSERT_EQ(cudaMalloc(&ballast, free_bytes - (48u << 20)), cudaSuccess);  // 48 MiB left
  EXPECT_THROW(attention_varlen(d.args(p, policy, stream.s)), ResourceError);
  cuda_ok(cudaStreamSynchronize(stream.s), "stream after the refused call");
  cudaFree(ballast);
  const Outcome after = d.download();
  std::size_t written = 0;
  for (double x : after.o) written += !std::isnan(x);
  EXPECT_EQ(written, 0u) << "output elements written by a call refused for memory";
  attention_varlen(d.args(p, policy, stream.s));  // the same call with the memory back
  cuda_ok(cudaStreamSynchronize(stream.s), "stream after the call");
  const Outcome done = d.download();
  const std::vector<std::size_t> rows = varlen_rows(p, 0, p.cu_q.back());
  for (std::size_t r : rows) ASSERT_TRUE(std::isfinite(done.lse[r])) << "row " << r;
}

// pasa (either path) and sage8 (the sm_90a kernels): the GPU's error against the fp32 exact run is
// within twice the emulator's own error running the same policy (cuda_case_harness.h's rule, one-sided).
// A bound on an error, so on fixed seeds: a failure replays.
TEST(CudaVarlen, PasaAndSage8MatchTheEmulatorsError) {
  REQUIRE_GPU();
  std::vector<const char*> presets{"pasa"};
  if (have_hopper_path()) presets.push_back("sage8");
  for (const char* preset : presets) {
    for (const bool causal : {false, true}) {
      const auto seed = test::kFixedSeeds[causal ? 1 : 0];
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << preset << " causal " << causal);
      std::mt19937_64 rng(seed);
      VarlenProblem p = make_varlen(kVarlenLengths, 128, DType::f16, DType::f16, rng);
      p.options.causal = causal;
      const Policy pol = preset_policy(preset);
      const Outcome gpu = run_varlen_on_device(p, pol);
      expect_varlen_structure(p, gpu);
      const std::vector<std::size_t> rows = varlen_rows(p, 0, p.cu_q.back());
      const Outcome g = select_rows(gpu, rows, p.D);
      const Outcome e = select_rows(run_varlen_on_host(p, pol), rows, p.D);
      VarlenProblem unrounded = p;  // the reference keeps its fp32 output
      unrounded.out = DType::f32;
      const Outcome ref = select_rows(run_varlen_on_host(unrounded, preset_policy("exact")), rows, p.D);
      const double err_gpu = test::relative_rmse(g.o, ref.o), err_emu = test::relative_rmse(e.o, ref.o);
      ASSERT_TRUE(std::isfinite(err_emu));
      EXPECT_LE(err_gpu, 2 * err_emu + 1e-4) << "O: GPU " << err_gpu << " vs emulator " << err_emu;
      const std::vector<double> ref_lse(ref.lse.begin(), ref.lse.end());
      const double lse_gpu = lse_rms_error(g.lse, ref_lse), lse_emu = lse_rms_error(e.lse, ref_lse);
      const double lse_units = pol.shift == Shift::pasa ? 8.0 : 1.0;  // as check_case allows
      EXPECT_LE(lse_gpu, 2 * lse_emu + 1e-4 + lse_units * pol.softmax.epsilon() * lse_rms(ref_lse))
          << "LSE: GPU " << lse_gpu << " vs emulator " << lse_emu << " (NaN: fully masked rows differ)";
    }
  }
}

// Reading cu_seqlens on the host cannot be captured: the call throws before it touches the stream,
// so the capture stays valid, and nothing is written.
TEST(CudaVarlen, ACallOnACapturingStreamThrows) {
  REQUIRE_GPU();
  std::mt19937_64 rng(test::fresh_seed());
  const VarlenProblem p = make_varlen(kVarlenLengths, 128, DType::f16, DType::f16, rng);
  DeviceVarlen d(p);
  Stream stream;
  cuda_ok(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  expect_error_naming([&] { attention_varlen(d.args(p, exact_policy(DType::f16), stream.s)); }, {"captur"});
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream.s, &graph);
  if (graph != nullptr) cudaGraphDestroy(graph);
  EXPECT_EQ(end, cudaSuccess) << "the rejected call broke the capture: " << cudaGetErrorString(end);
  cuda_ok(cudaStreamSynchronize(stream.s), "stream after the capture");
  const Outcome after = d.download();
  std::size_t written = 0;
  for (double x : after.o) written += !std::isnan(x);
  for (float x : after.lse) written += !std::isnan(x);
  EXPECT_EQ(written, 0u) << "output or LSE elements written by a rejected call";
}

}  // namespace
}  // namespace pasa
