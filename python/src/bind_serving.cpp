// SPDX-License-Identifier: Apache-2.0
// pasa._core.attention_varlen and pasa._core.attention_with_kvcache: the serving layouts of
// pasa/serving.h on DLPack arrays, in flash-attn's layouts (packed [total, H, D]; caches
// [num_blocks, block_size, H_kv, D]; q [B, S_q, H_q, D]). Outputs are allocated by the caller. Every
// array is on q's device: host arrays run on the CPU emulator, CUDA arrays (the index arrays too) on
// the GPU, on the stream the caller passes.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "text/format.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "array_views.h"
#include "attention_checks.h"
#include "bindings.h"
#include "interruptible.h"
#include "pasa/error.h"
#include "pasa/serving.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace pasa::python {
namespace {

// A packed [total, H, D] array as the [1, H, total, D] view pasa/serving.h reads.
TensorView packed_array_view(const ArrayInfo& a, const char* name) {
  if (a.ndim != 3) {
    throw Error(text::format("{}: expected a 3-D packed array [total, H, D], got {}-D with shape {}", name,
                            a.ndim, shape_text(a)));
  }
  if (a.shape[1] < 1 || a.shape[2] < 1) {
    throw Error(text::format("{}: shape {} has {} heads of head dim {}; a packed array needs at least one head "
                            "and head dim >= 1", name, shape_text(a), a.shape[1], a.shape[2]));
  }
  const std::int64_t shape[4] = {1, a.shape[0], a.shape[1], a.shape[2]};
  const std::int64_t strides[4] = {std::max<std::int64_t>(1, a.shape[0] * a.strides[0]), a.strides[0],
                                   a.strides[1], a.strides[2]};
  ArrayInfo four = a;
  four.ndim = 4;
  four.shape = shape;
  four.strides = strides;
  return attention_view(four, name, Layout::bshd);
}

// An int32 array of `rank` dims on q's device, C-contiguous: cu_seqlens, cache_seqlens, block_table.
// A device array's pointer is passed through as it is: the C++ API reads it on the GPU.
const std::int32_t* int32_array(const ArrayInfo& a, const char* name, std::size_t rank,
                                const ArrayInfo& q) {
  const bool int32 = a.dtype == nb::dtype<std::int32_t>();
  if (a.ndim != rank || !int32) {
    throw Error(text::format("{}: expected a {}-D int32 array, got {}-D {} with shape {}", name, rank,
                            a.ndim, dtype_text(a.dtype), shape_text(a)));
  }
  check_same_device(q, a, name);
  if (a.strides[rank - 1] != 1 && a.shape[rank - 1] > 1) {
    throw Error(text::format("{}: must be contiguous (numpy.ascontiguousarray, torch.Tensor.contiguous)",
                             name));
  }
  if (rank == 2 && a.shape[0] > 1 && a.strides[0] != a.shape[1]) {
    throw Error(text::format("{}: rows must be contiguous (numpy.ascontiguousarray, "
                             "torch.Tensor.contiguous)", name));
  }
  return static_cast<const std::int32_t*>(a.data);
}

AttentionArgs options(const Policy& policy, bool causal, const std::string& alignment,
                      std::optional<double> scale, std::uintptr_t stream) {
  AttentionArgs o;
  o.stream = reinterpret_cast<void*>(stream);
  o.policy = policy;
  o.causal = causal;
  if (alignment != "bottom_right" && alignment != "top_left") {
    throw Error("causal_alignment: '" + alignment + "' is not 'bottom_right' or 'top_left'");
  }
  o.alignment = alignment == "top_left" ? CausalAlignment::top_left : CausalAlignment::bottom_right;
  o.scale = scale;
  return o;
}

void attention_varlen(const InputArray& q, const InputArray& k, const InputArray& v,
                      const OutputArray& out, const std::optional<OutputArray>& lse,
                      const InputArray& cu_seqlens_q, const InputArray& cu_seqlens_k,
                      std::int64_t max_seqlen_q, std::int64_t max_seqlen_k, const Policy& policy,
                      bool causal, const std::string& alignment, std::optional<double> scale,
                      std::uintptr_t stream) {
  VarlenArgs args;
  args.options = options(policy, causal, alignment, scale, stream);
  const ArrayInfo qi = array_info(q), ki = array_info(k), vi = array_info(v), oi = array_info(out),
                  cq = array_info(cu_seqlens_q), ck = array_info(cu_seqlens_k);
  args.q = packed_array_view(qi, "q");
  args.k = packed_array_view(ki, "k");
  args.v = packed_array_view(vi, "v");
  args.o = packed_array_view(oi, "out");
  // The C++ API checks its output `o` the same way; here the message names the Python argument.
  check_view(args.o, "out", /*is_output=*/true, ViewForm::packed);
  check_same_device(qi, ki, "k");
  check_same_device(qi, vi, "v");
  check_same_device(qi, oi, "out");
  check_output_elements(oi, "out");
  for (const auto& [input, name] : {std::pair{&qi, "q"}, {&ki, "k"}, {&vi, "v"}}) {
    check_no_overlap(oi, "out", *input, name);
  }
  args.cu_seqlens_q = int32_array(cq, "cu_seqlens_q", 1, qi);
  args.cu_seqlens_k = int32_array(ck, "cu_seqlens_k", 1, qi);
  // (The offsets are read while out is written; the C++ API checks lse against them.)
  for (const auto& [index, name] : {std::pair{&cq, "cu_seqlens_q"}, {&ck, "cu_seqlens_k"}}) {
    check_no_overlap(oi, "out", *index, name);
  }
  if (cq.shape[0] < 2) {
    throw Error(text::format("cu_seqlens_q: {} integers, but it needs B + 1 >= 2 (sequence b owns tokens "
                             "cu_seqlens_q[b]:cu_seqlens_q[b + 1])", cq.shape[0]));
  }
  if (ck.shape[0] != cq.shape[0]) {
    throw Error(text::format("cu_seqlens_k: cu_seqlens_q and cu_seqlens_k need the same length B + 1 >= "
                            "2, got {} and {}", cq.shape[0], ck.shape[0]));
  }
  args.batch = cq.shape[0] - 1;
  args.max_seqlen_q = max_seqlen_q;
  args.max_seqlen_k = max_seqlen_k;
  if (lse) {  // flash-attn's varlen LSE: [H_q, total_q]
    const ArrayInfo li = array_info(*lse);
    if (li.ndim != 2 || pasa_dtype(li.dtype) != DType::f32) {
      throw Error(text::format("lse: expected a 2-D float32 array [H_q, total_q], got {}-D {} with "
                              "shape {}", li.ndim, dtype_text(li.dtype), shape_text(li)));
    }
    check_same_device(qi, li, "lse");
    check_output_elements(li, "lse");
    for (const auto& [other, name] : {std::pair{&qi, "q"}, {&ki, "k"}, {&vi, "v"}, {&oi, "out"}}) {
      check_no_overlap(li, "lse", *other, name);
    }
    args.lse.data = static_cast<float*>(li.data);
    args.lse.device = args.q.device;
    args.lse.shape = {1, li.shape[0], li.shape[1]};
    args.lse.stride = {li.shape[0] * li.strides[0], li.strides[0], li.strides[1]};
  }
  released_call([&] { pasa::attention_varlen(args); });
}

// A cache as the call uses it: writable where this call appends into it, read-only otherwise (so a
// read-only or memory-mapped cache can serve calls without an append). The ndarray is kept in `held`,
// whose lifetime the returned info's shape and strides share.
ArrayInfo cache_info(nb::handle cache, const char* name, bool appended, std::optional<OutputArray>& held_rw,
                     std::optional<InputArray>& held_ro) {
  try {
    if (appended) return array_info(held_rw.emplace(nb::cast<OutputArray>(cache)));
    return array_info(held_ro.emplace(nb::cast<InputArray>(cache)));
  } catch (const nb::cast_error&) {
    throw Error(text::format("{}: expected a{} array (NumPy or DLPack) of a dtype DLPack carries, in native byte "
                             "order, with strides in whole elements{}", name, appended ? " writable" : "n",
                             appended ? ": appending k and v writes it" : ""));
  }
}

void attention_with_kvcache(const InputArray& q, nb::handle k_cache_arg, nb::handle v_cache_arg,
                            const std::optional<InputArray>& k,
                            const std::optional<InputArray>& v, const OutputArray& out,
                            const std::optional<OutputArray>& lse, const InputArray& cache_seqlens,
                            const std::optional<InputArray>& block_table, const Policy& policy,
                            bool causal, const std::string& alignment, std::optional<double> scale,
                            std::uintptr_t stream, const std::optional<nb::callable>& workspace) {
  KVCacheArgs args;
  args.options = options(policy, causal, alignment, scale, stream);
  // The C++ API checks it by its own name, `scale`; the Python argument is softmax_scale.
  if (scale) check_scale(*scale, policy, "softmax_scale");
  std::optional<OutputArray> k_cache_rw, v_cache_rw;
  std::optional<InputArray> k_cache_ro, v_cache_ro;
  const bool appends = k.has_value() || v.has_value();
  const ArrayInfo qi = array_info(q), oi = array_info(out), cs = array_info(cache_seqlens),
                  kc = cache_info(k_cache_arg, "k_cache", appends, k_cache_rw, k_cache_ro),
                  vc = cache_info(v_cache_arg, "v_cache", appends, v_cache_rw, v_cache_ro);
  args.q = attention_view(qi, "q", Layout::bshd);
  args.o = attention_view(oi, "out", Layout::bshd);
  // q before out: out is q's shape, and when the caller gave none it is the array allocated for it, so
  // an empty q (B or S_q of 0, whose out NumPy gives stride 0) is q's error, as the dense API says it.
  check_view(args.q, "q", /*is_output=*/false);
  check_view(args.o, "out", /*is_output=*/true);  // (as for the packed out above)
  args.k_cache = attention_view(kc, "k_cache", Layout::bshd);
  args.v_cache = attention_view(vc, "v_cache", Layout::bshd);
  check_same_device(qi, oi, "out");
  check_same_device(qi, kc, "k_cache");
  check_same_device(qi, vc, "v_cache");
  check_output_elements(oi, "out");
  check_no_overlap(oi, "out", qi, "q");
  for (const ArrayInfo* cache : {&kc, &vc}) check_no_overlap(oi, "out", *cache, "the cache");
  // The append writes the caches while it reads k and v, so neither cache may share memory with them;
  // whether k_cache and v_cache share an element (the halves of one buffer do not) is C++'s check.
  const auto new_tokens = [&](const std::optional<InputArray>& a, const char* name) {
    if (!a) return TensorView{};  // no data: no append
    const ArrayInfo info = array_info(*a);
    const TensorView view = attention_view(info, name, Layout::bshd);
    check_same_device(qi, info, name);
    check_no_overlap(kc, "k_cache", info, name);
    check_no_overlap(vc, "v_cache", info, name);
    check_no_overlap(oi, "out", info, name);
    return view;
  };
  args.k = new_tokens(k, "k");
  args.v = new_tokens(v, "v");
  args.cache_seqlens = int32_array(cs, "cache_seqlens", 1, qi);
  check_no_overlap(oi, "out", cs, "cache_seqlens");  // (read while out is written)
  if (cs.shape[0] != args.q.batch()) {
    throw Error(text::format("cache_seqlens: {} entries for a batch of {}", cs.shape[0], args.q.batch()));
  }
  if (block_table) {
    const ArrayInfo bt = array_info(*block_table);
    args.block_table = int32_array(bt, "block_table", 2, qi);
    check_no_overlap(oi, "out", bt, "block_table");
    if (bt.shape[0] != args.q.batch()) {
      throw Error(text::format("block_table: {} rows for a batch of {}", bt.shape[0], args.q.batch()));
    }
    args.max_blocks = bt.shape[1];
  }
  if (lse) {
    const ArrayInfo li = array_info(*lse);
    args.lse = lse_output_view(li);
    check_same_device(qi, li, "lse");
    check_no_overlap(li, "lse", oi, "out");  // the C++ API checks the rest, by the same names
  }
  if (workspace) {
    // The caller's workspace (workspace(bytes) -> a device pointer, 256-byte aligned) instead of one
    // allocated on the stream per call: inside CUDA-graph capture a stream allocation becomes the
    // graph's allocation and free nodes, which every replay runs (measured: 0.8 of 15.4 us at B 1, 4k keys).
    // The index arrays' values are not checked, as a captured call never checks them.
    const KVCachePlan plan(args);
    const std::size_t bytes = plan.workspace_bytes();
    const std::uintptr_t at = bytes == 0 ? 0 : nb::cast<std::uintptr_t>((*workspace)(bytes));
    nb::gil_scoped_release release;
    plan.run(args, reinterpret_cast<void*>(at));
    return;
  }
  released_call([&] { pasa::attention_with_kvcache(args); });
}

}  // namespace

void bind_serving(nb::module_& m) {
  m.def("attention_varlen", &attention_varlen, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
        "cu_seqlens_q"_a, "cu_seqlens_k"_a, "max_seqlen_q"_a, "max_seqlen_k"_a, "policy"_a, "causal"_a,
        "causal_alignment"_a, "scale"_a.none(), "stream"_a,
        "Packed variable-length attention (pasa::attention_varlen), writing `out` (and `lse`); device "
        "arrays run on `stream` (a cudaStream_t as an int).");
  m.def("attention_with_kvcache", &attention_with_kvcache, "q"_a, "k_cache"_a, "v_cache"_a, "k"_a.none(),
        "v"_a.none(), "out"_a, "lse"_a.none(), "cache_seqlens"_a, "block_table"_a.none(), "policy"_a,
        "causal"_a, "causal_alignment"_a, "scale"_a.none(), "stream"_a, "workspace"_a.none() = nb::none(),
        "Attention against a paged or dense KV cache (pasa::attention_with_kvcache), appending k, v; "
        "device arrays run on `stream` (a cudaStream_t as an int). workspace(bytes) -> pointer, if "
        "given, supplies the GPU workspace (the index arrays' values then go unchecked, as in capture).");
}

}  // namespace pasa::python
