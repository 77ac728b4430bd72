// SPDX-License-Identifier: Apache-2.0
// pasa::attention_with_kvcache on the CPU. Every check runs before the first write (the append
// included): the caches and the new keys, cache_seqlens, the block ids each sequence uses, the room
// for the append, appends into blocks other sequences read, and finite values in everything read.
// Then the new keys are written into the cache, and each sequence's keys are gathered from its
// blocks into a contiguous buffer (the cache's dtype, bit for bit) for the emulator.
#include "text/format.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attention_checks.h"
#include "cpu/backends.h"
#include "cpu/host_inputs.h"
#include "cuda_backend.h"
#include "interrupt.h"
#include "pasa/error.h"
#include "pasa/serving.h"
#include "kvcache_checks.h"
#include "memory_budget.h"
#include "memory_overlap.h"
#include "serving_sequence.h"
#include "storage_convert.h"

namespace pasa {
namespace {

// Where the positions of each sequence live: block ids and slots, paged or dense.
struct CacheMap {
  const std::int32_t* table;  // null: dense
  std::int64_t max_blocks;    // the caller's table row length (1 for dense)
  std::int64_t block_size;    // positions per block (S_max for dense)
  std::int64_t stride;        // row length of `table` (max_blocks, or fewer in a copy of the entries read)
  std::int64_t block(std::int64_t b, std::int64_t p) const {
    return table == nullptr ? b : table[b * stride + p / block_size];
  }
  // Saturating: max_blocks is the caller's number, and a product past 2^63 must not wrap negative.
  std::int64_t capacity() const {
    return max_blocks > std::numeric_limits<std::int64_t>::max() / block_size
               ? std::numeric_limits<std::int64_t>::max()
               : max_blocks * block_size;
  }
  std::int64_t blocks_for(std::int64_t len) const { return (len + block_size - 1) / block_size; }
};

// A cache only read is an input like any other, whose strides may be 0 (a broadcast view) on the CPU;
// one the call appends into (`written`) needs a distinct element per index, and the GPU path, whose
// kernels have not run on broadcast caches, takes positive strides only (`on_gpu`).
void check_cache_view(const TensorView& t, const char* name, bool written, bool on_gpu) {
  if (t.data == nullptr) throw Error(text::format("{}: data pointer is null", name));
  const int dt = static_cast<int>(t.dtype);
  if (dt < 0 || dt > static_cast<int>(DType::bf16)) {
    throw Error(text::format("{}: unsupported dtype (code {}); use f32, f16 or bf16", name, dt));
  }
  static const char* dims[] = {"block (or batch)", "heads", "block size (or S_max)", "head dim"};
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 1) throw Error(text::format("{}: {} size is {}", name, dims[i], t.shape[i]));
    if (t.shape[i] != 1 && t.stride[i] < (written || on_gpu ? 1 : 0)) {  // (a size-1 one's is never read)
      throw Error(text::format("{}: stride of the {} dimension is {} ({})", name, dims[i], t.stride[i],
                               written  ? "the cache is written: strides must be positive"
                               : on_gpu ? "the GPU path takes caches with positive strides"
                                        : "must be non-negative"));
    }
  }
}

// Copies D elements of one (position, head) row between views of the same dtype.
void copy_row(const TensorView& src, std::int64_t src_offset, const TensorView& dst,
              std::int64_t dst_offset) {
  const std::size_t size = dtype_size(src.dtype);
  const char* s = static_cast<const char*>(src.data);
  char* d = static_cast<char*>(dst.data);
  for (std::int64_t i = 0; i < src.dim(); ++i) {
    std::memcpy(d + (dst_offset + i * dst.stride[3]) * size, s + (src_offset + i * src.stride[3]) * size,
                size);
  }
}

// A cache row's values: finite, and within the policy's input format (`input`).
void check_cache_row(const TensorView& t, std::int64_t offset, const char* name, std::int64_t block,
                     std::int64_t h, std::int64_t slot, const Rounder& input) {
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    const double x = load_as_float(t.data, t.dtype, offset + d * t.stride[3]);
    if (!std::isfinite(x)) {
      throw Error(text::format("{}: non-finite value at [block, head, slot, dim] = [{}, {}, {}, {}] (inputs "
                              "must be finite, see docs/api.md)", name, block, h, slot, d));
    }
    if (!std::isfinite(input(x))) {
      throw input_overflow_error(name, x, text::format("[block, head, slot, dim] = [{}, {}, {}, {}]", block, h, slot, d),
                                 input.format());
    }
  }
}

// The caches and the new keys as tensors (no index values read); returns S_new.
std::int64_t check_cache_tensors(const KVCacheArgs& a, std::int64_t B, std::int64_t H_kv) {
  if (a.cache_seqlens == nullptr) throw Error("cache_seqlens: pointer is null");
  const std::int64_t num_blocks = a.k_cache.shape[0];
  if (a.block_table == nullptr && num_blocks != B) {
    throw Error(text::format("k_cache: a dense cache (no block_table) needs one row per sequence: {} "
                            "rows for batch {}", num_blocks, B));
  }
  if (a.block_table != nullptr && a.max_blocks < 1) {
    throw Error(text::format("max_blocks: {} (block_table's row length must be at least 1)", a.max_blocks));
  }
  // (int32 block ids index at most 2^31 blocks; a longer row's [B, max_blocks] table could pass the
  // address space, which the table's pointer arithmetic would wrap)
  if (a.block_table != nullptr && a.max_blocks > std::numeric_limits<std::int32_t>::max()) {
    throw Error(text::format("max_blocks: {}; block tables of int32 ids take rows of at most 2^31 - 1",
                             a.max_blocks));
  }
  std::int64_t s_new = 0;
  if ((a.k.data == nullptr) != (a.v.data == nullptr)) {
    throw Error("k/v: give both new keys and new values, or neither");
  }
  if (a.k.data != nullptr) {
    check_view(a.k, "k", false);
    check_view(a.v, "v", false);
    s_new = a.k.seq();
    const std::array<std::int64_t, 4> want{B, H_kv, s_new, a.k_cache.dim()};
    if (a.v.seq() != s_new) {
      throw Error(text::format("v: {} new positions (S_new), k {}; k and v give the same positions", a.v.seq(),
                              s_new));
    }
    for (const auto& [t, name] : {std::pair{&a.k, "k"}, {&a.v, "v"}}) {
      if (t->shape != want || s_new < 1) {
        throw Error(text::format("{}: shape [{}, {}, {}, {}] is not [B, H_kv, S_new, D] = [{}, {}, S_new "
                                ">= 1, {}]", name, t->shape[0], t->shape[1], t->shape[2], t->shape[3], B,
                                H_kv, a.k_cache.dim()));
      }
      if (t->dtype != a.k_cache.dtype) {
        throw Error(text::format("{}: dtype {} differs from the cache's {}", name, dtype_name(t->dtype),
                                dtype_name(a.k_cache.dtype)));
      }
      if (t->device != a.q.device) throw Error(text::format("{}: on a different device than q", name));
    }
    // More new positions than a sequence's room in the cache, whatever its length holds: a shape error,
    // refused here, where a plan (which reads no lengths) checks too.
    const CacheMap room{nullptr, a.block_table != nullptr ? a.max_blocks : 1, a.k_cache.shape[2], 1};
    if (s_new > room.capacity()) {
      throw Error(text::format("k: {} new positions (S_new), more than the cache's {} per sequence", s_new,
                              room.capacity()));
    }
    // One tensor passed as both caches: the append would write the new values over the new keys.
    if (a.k_cache.data == a.v_cache.data && canonical_strides(a.k_cache) == canonical_strides(a.v_cache)) {
      throw Error("v_cache: is k_cache (the same memory); an append would overwrite the new keys with the "
                  "new values: give the caches their own memory");
    }
  }
  return s_new;
}

// cache_seqlens and the block ids each sequence uses (host arrays, `map` over the table): lengths,
// ids in range, room for the append, and no append into a block another sequence reads.
void check_cache_indices(const KVCacheArgs& a, const CacheMap& map, std::int64_t B, std::int64_t s_new) {
  const std::int64_t num_blocks = a.k_cache.shape[0];
  // Which sequence appends into each block it writes (the last such sequence): such a block must be
  // no other sequence's. Kept for the appended blocks only, so that the check's memory and time follow
  // the tables, not the pool's size.
  std::unordered_map<std::int64_t, std::int64_t> appender;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t len = a.cache_seqlens[b];
    if (len < 0) throw Error(text::format("cache_seqlens: [{}] = {} is negative", b, len));
    if (len + s_new > map.capacity()) {
      throw Error(text::format("cache_seqlens: sequence {} holds {} positions; appending {} needs {}, "
                              "more than the cache's {} per sequence", b, len, s_new, len + s_new,
                              map.capacity()));
    }
    for (std::int64_t i = 0; i < map.blocks_for(len + s_new); ++i) {
      const std::int64_t id = map.block(b, i * map.block_size);
      if (id < 0 || id >= num_blocks) {
        throw Error(text::format("block_table: [{}, {}] = {} is outside [0, {}) (num_blocks)", b, i, id,
                                num_blocks));
      }
      if (s_new > 0 && (i + 1) * map.block_size > len) appender[id] = b;  // the append writes here
    }
  }
  if (appender.empty()) return;
  // Where each appended block was last seen in its appender's table (any other sequence holding it is
  // refused first): a block an append writes may appear once in all the tables.
  std::unordered_map<std::int64_t, std::int64_t> seen_at;
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t i = 0; i < map.blocks_for(a.cache_seqlens[b] + s_new); ++i) {
      const std::int64_t id = map.block(b, i * map.block_size);
      const auto writer = appender.find(id);
      if (writer == appender.end()) continue;
      if (writer->second != b) {
        throw Error(text::format("block_table: block {} is used by sequences {} and {}, and {}'s append "
                                "writes into it", id, b, writer->second, writer->second));
      }
      const auto [place, first] = seen_at.try_emplace(id, i);
      if (!first && place->second != i) {
        throw Error(text::format("block_table: block {} is at [{}, {}] and [{}, {}], and sequence {}'s "
                                "append writes into it", id, b, place->second, b, i, b));
      }
      place->second = i;
    }
  }
}

// The most entries of a block-table row that a sequence reads (0 for a dense cache).
std::int64_t table_entries_read(const KVCacheArgs& a, const CacheMap& map, std::int64_t B, std::int64_t s_new) {
  if (a.block_table == nullptr) return 0;
  std::int64_t most = 0;
  for (std::int64_t b = 0; b < B; ++b) most = std::max(most, map.blocks_for(a.cache_seqlens[b] + s_new));
  return most;
}

// Host copies of the index arrays: the checks and the work read them. Device arrays must come to the
// host anyway; host arrays may change during the call (another thread of a Python program, the GIL
// released), which would let the work index past what the checks saw. Sized (and checked against
// memory) before they are allocated.
struct IndexCopies {
  std::vector<std::int32_t> seqlens, table;
  KVCacheArgs caller;
  std::int64_t stride;  // row length of `table`
  // The caller's arguments and the cache's map, reading the copies (made on use, so that no pointer
  // into the vectors outlives a move of this object).
  KVCacheArgs args() const {
    KVCacheArgs a = caller;
    a.cache_seqlens = seqlens.data();
    a.block_table = caller.block_table != nullptr ? table.data() : nullptr;
    return a;
  }
  CacheMap map() const {
    const bool paged = caller.block_table != nullptr;
    return {paged ? table.data() : nullptr, paged ? caller.max_blocks : 1, caller.k_cache.shape[2], paged ? stride : 1};
  }
};

IndexCopies allocate_index_copies(const KVCacheArgs& args, std::int64_t B, std::int64_t table_stride) {
  const bool paged = args.block_table != nullptr;
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  require_memory(saturating_product({u(B), paged ? u(table_stride) + 1 : 1, sizeof(std::int32_t)}),
                 "attention_with_kvcache: cache_seqlens and block_table copied to the host");
  return {std::vector<std::int32_t>(static_cast<std::size_t>(B)),
          std::vector<std::int32_t>(paged ? static_cast<std::size_t>(B * table_stride) : 0), args, table_stride};
}

// The CPU path's copies: cache_seqlens, then of each block-table row only the entries its sequence
// reads (the row length is the caller's number, possibly far beyond them); a row shorter than its
// sequence needs is refused by check_cache_indices from the lengths alone.
IndexCopies copy_host_indices(const KVCacheArgs& args, std::int64_t B, std::int64_t s_new) {
  std::vector<std::int32_t> lens(args.cache_seqlens, args.cache_seqlens + B);
  const CacheMap blocks{nullptr, args.max_blocks, args.k_cache.shape[2], 1};  // (for blocks_for)
  const auto entries_read = [&](std::int64_t b) {
    const std::int64_t len = std::max<std::int64_t>(lens[static_cast<std::size_t>(b)], 0);
    return std::min(args.max_blocks, blocks.blocks_for(len + s_new));
  };
  std::int64_t stride = 1;
  for (std::int64_t b = 0; args.block_table != nullptr && b < B; ++b) stride = std::max(stride, entries_read(b));
  IndexCopies c = allocate_index_copies(args, B, stride);
  for (std::int64_t b = 0; args.block_table != nullptr && b < B; ++b) {
    std::copy_n(args.block_table + b * args.max_blocks, entries_read(b), c.table.begin() + b * stride);
  }
  c.seqlens = std::move(lens);
  return c;
}

// The GPU path: the index arrays are device memory, checked on host copies unless the stream is
// being captured (pasa/serving.h), then the kernels run on the cache in place.
void kvcache_on_gpu(const KVCacheArgs& args, const AttentionArgs& whole, std::int64_t B, std::int64_t s_new) {
  const bool paged = args.block_table != nullptr;
  IndexCopies copies = allocate_index_copies(args, B, args.max_blocks);  // (whole rows: one copy each array)
  if (cuda_read_to_host(copies.seqlens.data(), args.cache_seqlens, copies.seqlens.size() * sizeof(std::int32_t),
                        args.options.stream, "cache_seqlens") &&
      (!paged || cuda_read_to_host(copies.table.data(), args.block_table,
                                   copies.table.size() * sizeof(std::int32_t), args.options.stream, "block_table"))) {
    const KVCacheArgs host = copies.args();
    const CacheMap map = copies.map();
    check_cache_indices(host, map, B, s_new);
    check_index_memory(args, s_new > 0, table_entries_read(host, map, B, s_new));
  }
  cuda_attention_with_kvcache(whole, cuda_kv_cache(args));
}

}  // namespace

// k_cache and v_cache may interleave (the halves of one buffer) but, when the call appends, share no
// element (check_no_shared_element).
void check_kvcache_memory(const KVCacheArgs& a, bool appends) {
  const NamedMemory q{memory_of(a.q), "q"}, k_cache{memory_of(a.k_cache), "k_cache"},
      v_cache{memory_of(a.v_cache), "v_cache"};
  // What o and lse stay apart from: q, the caches, the new keys and values.
  NamedMemory others[5] = {q, k_cache, v_cache};
  std::size_t n = 3;
  if (appends) {
    others[n++] = {memory_of(a.k), "k"};
    others[n++] = {memory_of(a.v), "v"};
    check_no_shared_element(k_cache.memory, k_cache.name, v_cache.memory, v_cache.name);
    const NamedMemory read[3] = {q, others[3], others[4]};  // what the append reads as it writes
    check_written(k_cache, read);
    check_written(v_cache, read);
  }
  check_outputs(a.o, a.lse, {others, n});
  // The index arrays as far as they are known without reading them: cache_seqlens, and the first
  // entry of each row of the block table (check_index_memory, once the lengths are read, the rest).
  check_index_memory(a, appends, 1);
}

void check_index_memory(const KVCacheArgs& a, bool appends, std::int64_t table_entries) {
  const std::int64_t batch = a.q.shape[0];
  const std::array<std::int64_t, 2> table_shape{batch, table_entries}, table_stride{a.max_blocks, 1};
  NamedMemory indices[2];
  std::size_t n = 0;
  if (a.cache_seqlens != nullptr) indices[n++] = {memory_of(a.cache_seqlens, batch), "cache_seqlens"};
  if (a.block_table != nullptr && table_entries > 0) {
    indices[n++] = {{a.block_table, sizeof(std::int32_t), table_shape, table_stride}, "block_table"};
  }
  // (o, lse and the caches' own elements are check_kvcache_memory's, which every path runs first.)
  check_outputs_apart(a.o, a.lse, {indices, n});
  if (appends) {
    check_apart_from({memory_of(a.k_cache), "k_cache"}, {indices, n});
    check_apart_from({memory_of(a.v_cache), "v_cache"}, {indices, n});
  }
}

KVCacheProblem check_kvcache_tensors(const KVCacheArgs& args) {
  KVCacheProblem problem;
  problem.on_gpu = serving_on_gpu(args.options, args.q);
  refuse_serving_mask(args.options, "attention_with_kvcache");
  const bool appends = args.k.data != nullptr || args.v.data != nullptr;
  check_cache_view(args.k_cache, "k_cache", appends, problem.on_gpu);
  check_cache_view(args.v_cache, "v_cache", appends, problem.on_gpu);
  if (args.v_cache.shape != args.k_cache.shape) {
    const auto& v = args.v_cache.shape;
    const auto& k = args.k_cache.shape;
    throw Error(text::format("v_cache: shape [{}, {}, {}, {}] (block, head, slot, dim) differs from k_cache's "
                             "[{}, {}, {}, {}]", v[0], v[1], v[2], v[3], k[0], k[1], k[2], k[3]));
  }
  if (args.v_cache.dtype != args.k_cache.dtype) {
    throw Error("v_cache: dtype " + dtype_name(args.v_cache.dtype) + " differs from k_cache's " +
                dtype_name(args.k_cache.dtype));
  }
  if (args.k_cache.device != args.q.device || args.v_cache.device != args.q.device) {
    throw Error("k_cache/v_cache: on a different device than q");
  }
  if (args.q.shape[1] % args.k_cache.heads() != 0 || args.q.dim() != args.k_cache.dim()) {
    throw Error(text::format("k_cache: {} heads of dim {} do not fit q's {} heads of dim {} (H_q must be a "
                            "multiple of H_kv, the head dims equal)", args.k_cache.heads(),
                            args.k_cache.dim(), args.q.shape[1], args.q.dim()));
  }
  // q, o, lse and the options as the dense API checks them, with k and v standing for the cache of
  // one sequence (a view of no real memory: check_kvcache_memory checks the tensors themselves).
  AttentionArgs& whole = problem.whole;
  whole = call_options(args);
  whole.k = whole.v = slice_rows(args.k_cache, 0, 0, args.k_cache.shape[2]);
  whole.k.shape[0] = whole.v.shape[0] = args.q.shape[0];
  problem.shape = check_attention_problem(whole);
  problem.s_new = check_cache_tensors(args, problem.shape.batch, problem.shape.heads_kv);
  check_kvcache_memory(args, problem.s_new > 0);
  if (problem.on_gpu && args.k_cache.shape[0] > std::numeric_limits<std::int32_t>::max()) {
    throw Error(text::format("k_cache: {} blocks; the GPU kernels take at most 2^31 - 1", args.k_cache.shape[0]));
  }
  if (!problem.on_gpu && problem.shape.dim > 1024) {
    throw Error(text::format("q: head dim {} is larger than the CPU backends' 1024", problem.shape.dim));
  }
  return problem;
}

AttentionArgs call_options(const KVCacheArgs& args) {
  AttentionArgs call = args.options;
  call.q = args.q;
  call.o = args.o;
  call.lse = args.lse;
  return call;
}

CudaKvCache cuda_kv_cache(const KVCacheArgs& args) {
  CudaKvCache cache{args.k_cache, args.v_cache, TensorView{}, TensorView{}, args.cache_seqlens,
                    args.block_table, args.max_blocks};
  if (args.k.data != nullptr) {
    cache.k_new = args.k;
    cache.v_new = args.v;
  }
  return cache;
}

void attention_with_kvcache(const KVCacheArgs& caller) {
  const KVCacheProblem problem = check_kvcache_tensors(caller);
  const ProblemShape& shape = problem.shape;
  const std::int64_t B = shape.batch, s_new = problem.s_new;
  if (problem.on_gpu) {
    kvcache_on_gpu(caller, problem.whole, B, s_new);
    return;
  }
  const IndexCopies copies = copy_host_indices(caller, B, s_new);
  const KVCacheArgs args = copies.args();
  const CacheMap map = copies.map();
  check_cache_indices(args, map, B, s_new);
  check_index_memory(caller, s_new > 0, table_entries_read(args, map, B, s_new));
  // The policy's checks that depend on the call (PASA's M and the scale), which the emulator would
  // make only in the first sequence's turn, after the append.
  check_emulator_policy(args.options, shape.dim);
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < B; ++b) longest = std::max<std::int64_t>(longest, args.cache_seqlens[b] + s_new);
  const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
  const std::uint64_t gathered =
      saturating_product({2, u(shape.heads_kv), u(longest), u(shape.dim), dtype_size(args.k_cache.dtype)});
  require_sequence_memory({1, shape.heads_q, shape.heads_kv, shape.seq_q, longest, shape.dim},
                          args.options.policy, gathered);
  // Every value read is checked here, for every sequence: the emulator would check each sequence's
  // values only in its turn, after earlier sequences (and the append) were written.
  const Rounder input(args.options.policy.input);
  check_finite_host(args.q, "q");
  check_fits_input(args.q, "q", input);
  if (s_new > 0) {
    check_finite_host(args.k, "k");
    check_finite_host(args.v, "v");
    check_fits_input(args.k, "k", input);
    check_fits_input(args.v, "v", input);
  }
  const TensorView* caches[] = {&args.k_cache, &args.v_cache};
  const char* cache_names[] = {"k_cache", "v_cache"};
  InterruptPoll interrupt;  // (the check and the gather below read millions of keys on this thread alone)
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t p = 0; p < args.cache_seqlens[b]; ++p) {
      if (p % kRowsPerPoll == 0) interrupt.poll();
      const std::int64_t id = map.block(b, p), slot = p % map.block_size;
      for (int c = 0; c < 2; ++c) {
        for (std::int64_t h = 0; h < shape.heads_kv; ++h) {
          check_cache_row(*caches[c], caches[c]->offset(id, h, slot, 0), cache_names[c], id, h, slot, input);
        }
      }
    }
  }

  // The append (flash-attn's semantics: the cache keeps the new keys).
  const TensorView* news[] = {&args.k, &args.v};
  for (std::int64_t b = 0; b < B && s_new > 0; ++b) {
    for (std::int64_t i = 0; i < s_new; ++i) {
      const std::int64_t p = args.cache_seqlens[b] + i, id = map.block(b, p), slot = p % map.block_size;
      for (int c = 0; c < 2; ++c) {
        for (std::int64_t h = 0; h < shape.heads_kv; ++h) {
          copy_row(*news[c], news[c]->offset(b, h, i, 0), *caches[c], caches[c]->offset(id, h, slot, 0));
        }
      }
    }
  }

  AttentionStats stats;
  const std::int64_t D = shape.dim, H_kv = shape.heads_kv;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t len = args.cache_seqlens[b] + s_new;
    std::vector<std::uint8_t> bytes[2];
    TensorView dense[2];
    for (int c = 0; c < 2; ++c) {
      bytes[c].resize(static_cast<std::size_t>(H_kv * len * D) * dtype_size(caches[c]->dtype));
      dense[c] = bhsd_view(bytes[c].data(), caches[c]->dtype, 1, H_kv, len, D);
      for (std::int64_t p = 0; p < len; ++p) {
        if (p % kRowsPerPoll == 0) interrupt.poll();
        const std::int64_t id = map.block(b, p), slot = p % map.block_size;
        for (std::int64_t h = 0; h < H_kv; ++h) {
          copy_row(*caches[c], caches[c]->offset(id, h, slot, 0), dense[c], dense[c].offset(0, h, p, 0));
        }
      }
    }
    run_sequence(args.options, slice_rows(args.q, b, 0, shape.seq_q), dense[0], dense[1],
                 slice_rows(args.o, b, 0, shape.seq_q), slice_rows(args.lse, b, 0, shape.seq_q), stats);
  }
  if (args.options.stats != nullptr) *args.options.stats = stats;
}

}  // namespace pasa
