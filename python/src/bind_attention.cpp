// SPDX-License-Identifier: Apache-2.0
// pasa._core.attention, pasa._core.PlannedAttention and pasa._core.reference: DLPack arrays in,
// pasa::attention / AttentionPlan / pasa::reference_attention out. Outputs are allocated by the
// caller (Python), so nothing here allocates device memory: CUDA work goes on the stream the caller
// passes, CUDA-graph friendly.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "array_views.h"
#include "bindings.h"
#include "cuda_backend.h"
#include "interruptible.h"
#include "memory_budget.h"
#include "pasa/attention.h"
#include "pasa/attention_plan.h"
#include "pasa/error.h"
#include "text/format.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace pasa::python {
namespace {

CausalAlignment parse_alignment(const std::string& text) {
  if (text == "bottom_right") return CausalAlignment::bottom_right;
  if (text == "top_left") return CausalAlignment::top_left;
  throw Error("causal_alignment: '" + text + "' is not 'bottom_right' or 'top_left'");
}

// What a call adds to the scores: the sliding window, the softcap and the attention mask (4-D,
// broadcast by the caller to [B or 1, H_q or 1, S_q, S_kv]; "boolean" masks come as one byte each).
struct ScoreModArgs {
  std::int64_t window_left = -1, window_right = -1;
  double softcap = 0.0;
  std::optional<InputArray> mask;
  std::string mask_kind = "none";
};

void apply_score_mods(AttentionArgs& args, const ArrayInfo& q, const ScoreModArgs& mods) {
  args.window_left = mods.window_left;
  args.window_right = mods.window_right;
  args.softcap = mods.softcap;
  if (!mods.mask) return;
  const ArrayInfo m = array_info(*mods.mask);
  if (m.ndim != 4) {
    throw Error("attn_mask: expected a 4-D array [B, H, S_q, S_kv], got shape " + shape_text(m));
  }
  check_same_device(q, m, "attn_mask");
  MaskView& view = args.mask;
  view.data = m.data;
  if (mods.mask_kind == "boolean") {
    if (m.dtype.bits != 8 || m.dtype.lanes != 1) {
      throw Error("attn_mask: a boolean mask must have one byte per element, got " + dtype_text(m.dtype));
    }
    view.kind = MaskKind::boolean;
  } else if (mods.mask_kind == "additive") {
    const std::optional<DType> dtype = pasa_dtype(m.dtype);
    if (!dtype) {
      throw Error("attn_mask: unsupported dtype " + dtype_text(m.dtype) +
                  " (an additive mask is float32, float16 or bfloat16; a boolean one bool)");
    }
    view.kind = MaskKind::additive;
    view.dtype = *dtype;
  } else {
    throw Error("attn_mask: kind '" + mods.mask_kind + "' is not additive or boolean");
  }
  view.device = args.q.device;
  for (int i = 0; i < 4; ++i) {
    view.shape[i] = m.shape[i];
    view.stride[i] = m.strides[i];
  }
}

// q, k, v (and o when given) as views, each checked on its own and for its device.
AttentionArgs make_args(const InputArray& q, const InputArray& k, const InputArray& v,
                        const Policy& policy, bool causal, const std::string& alignment,
                        std::optional<double> scale, const std::string& layout_text,
                        const ScoreModArgs& mods) {
  const Layout layout = parse_layout(layout_text);
  const ArrayInfo qi = array_info(q), ki = array_info(k), vi = array_info(v);
  AttentionArgs args;
  args.q = attention_view(qi, "q", layout);
  args.k = attention_view(ki, "k", layout);
  args.v = attention_view(vi, "v", layout);
  check_same_device(qi, ki, "k");
  check_same_device(qi, vi, "v");
  args.policy = policy;
  args.causal = causal;
  args.alignment = parse_alignment(alignment);
  args.scale = scale;
  apply_score_mods(args, qi, mods);
  return args;
}

// The arguments of one call: q, k, v as make_args, and the outputs o (and lse when given), each
// checked for its device and for overlapping the inputs.
AttentionArgs call_args(const InputArray& q, const InputArray& k, const InputArray& v, const OutputArray& o,
                        const std::optional<OutputArray>& lse, const Policy& policy, bool causal,
                        const std::string& alignment, std::optional<double> scale, const std::string& layout,
                        std::uintptr_t stream, const ScoreModArgs& mods) {
  AttentionArgs args = make_args(q, k, v, policy, causal, alignment, scale, layout, mods);
  const ArrayInfo inputs[] = {array_info(q), array_info(k), array_info(v)};
  const char* input_names[] = {"q", "k", "v"};
  const ArrayInfo oi = array_info(o);
  args.o = attention_view(oi, "out", parse_layout(layout));
  // The C++ API checks its output `o` the same way; here the messages name the Python argument. (An
  // empty array's strides mean nothing: the C++ API then names its zero size.)
  if (args.o.shape != args.q.shape) {  // (named in the arrays' own layout, as the caller gave them)
    throw Error("out: shape " + shape_text(oi) + " differs from q's " + shape_text(inputs[0]));
  }
  static const char* dims[] = {"batch", "heads", "sequence", "head dim"};
  const bool empty = args.o.shape[0] == 0 || args.o.shape[1] == 0 || args.o.shape[2] == 0 || args.o.shape[3] == 0;
  for (int i = 0; i < 4 && !empty; ++i) {
    if (args.o.stride[i] < 1 && args.o.shape[i] != 1) {  // (a size-1 dimension's stride is never read)
      throw Error(text::format("out: stride of the {} dimension is {} (must be positive)", dims[i], args.o.stride[i]));
    }
  }
  check_same_device(inputs[0], oi, "out");
  check_output_elements(oi, "out");
  for (int i = 0; i < 3; ++i) check_no_overlap(oi, "out", inputs[i], input_names[i]);
  if (mods.mask) check_no_overlap(oi, "out", array_info(*mods.mask), "attn_mask");
  if (lse) {
    const ArrayInfo li = array_info(*lse);
    args.lse = lse_output_view(li);
    check_same_device(inputs[0], li, "lse");
    check_output_elements(li, "lse");
    for (int i = 0; i < 3; ++i) check_no_overlap(li, "lse", inputs[i], input_names[i]);
    if (mods.mask) check_no_overlap(li, "lse", array_info(*mods.mask), "attn_mask");
    check_no_overlap(li, "lse", oi, "out");
  }
  args.stream = reinterpret_cast<void*>(stream);
  return args;
}

void attention_released(const AttentionArgs& args) {
  released_call([&] { pasa::attention(args); });  // q, k, v, o stay alive: the caller's ndarrays hold references
}

// An AttentionPlan with the arguments it was made from, run on new data pointers alone: the cached
// plans of pasa.attention's eager torch path, which keys them on everything else a plan depends on
// (shapes, strides, dtypes, devices, options), so a repeated call skips the checks, the planning and
// the DLPack capsules. run() trusts its caller as AttentionPlan::run does: the pointers are the
// device memory of tensors with the planned shapes, strides and dtypes, and out does not overlap
// the inputs.
class PlannedAttention {
 public:
  explicit PlannedAttention(const AttentionArgs& args) : args_(args), plan_(args) {}

  std::size_t workspace_bytes() const { return plan_.workspace_bytes(); }

  void run(std::uintptr_t q, std::uintptr_t k, std::uintptr_t v, std::uintptr_t o, std::uintptr_t lse,
           std::uintptr_t workspace, std::uintptr_t stream) const {
    if ((lse != 0) != (args_.lse.data != nullptr)) {
      throw Error(args_.lse.data != nullptr ? "lse: the plan writes an LSE, but none was given"
                                            : "lse: the plan was made without an LSE");
    }
    AttentionArgs call = args_;
    call.q.data = reinterpret_cast<void*>(q);
    call.k.data = reinterpret_cast<void*>(k);
    call.v.data = reinterpret_cast<void*>(v);
    call.o.data = reinterpret_cast<void*>(o);
    call.lse.data = reinterpret_cast<float*>(lse);
    call.stream = reinterpret_cast<void*>(stream);
    nb::gil_scoped_release release;
    plan_.run(call, reinterpret_cast<void*>(workspace));
  }

 private:
  AttentionArgs args_;
  AttentionPlan plan_;
};

// A NumPy float64 array that owns `values`.
nb::object numpy_f64(std::vector<double>&& values, std::vector<std::size_t> shape) {
  auto* owned = new std::vector<double>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  return nb::ndarray<nb::numpy, double>(owned->data(), shape.size(), shape.data(), owner).cast();
}

nb::tuple reference(const InputArray& q, const InputArray& k, const InputArray& v,
                    const Policy& policy, bool causal, const std::string& alignment,
                    std::optional<double> scale, const std::string& layout, const ScoreModArgs& mods) {
  AttentionArgs args = make_args(q, k, v, policy, causal, alignment, scale, layout, mods);
  // reference_attention returns its own buffers and ignores o, but the shared argument checks
  // want a well-formed o: describe q's shape over q's memory (never written).
  args.o = bhsd_view(args.q.data, args.q.dtype, args.q.shape[0], args.q.shape[1], args.q.shape[2],
                     args.q.shape[3], args.q.device);
  ReferenceResult result = released_call([&] { return reference_attention(args); });
  const auto& s = args.q.shape;
  const auto B = static_cast<std::size_t>(s[0]), H = static_cast<std::size_t>(s[1]),
             S = static_cast<std::size_t>(s[2]), D = static_cast<std::size_t>(s[3]);
  nb::object o = numpy_f64(std::move(result.o), {B, H, S, D});
  nb::object lse = numpy_f64(std::move(result.lse), {B, H, S});
  return nb::make_tuple(o, lse);
}

}  // namespace

void bind_attention(nb::module_& m) {
  // The package's check of a new host output before it allocates it (pasa._arrays.reserve_host_output).
  m.def("require_memory", [](std::uint64_t bytes, const std::string& what) { require_memory(bytes, what); },
        "bytes"_a, "what"_a);
  // Whether the GPU kernels take a window, softcap or mask under a policy, for inputs of a 16-bit
  // dtype ("float16" or "bfloat16"): the routed calls ask it outside traced code, once a policy.
  m.def("cuda_runs_score_mods", [](const Policy& policy, const std::string& dtype) {
    if (dtype != "float16" && dtype != "bfloat16") throw Error("dtype: '" + dtype + "' is not float16 or bfloat16");
    return cuda_runs_score_mods(policy, dtype == "float16" ? DType::f16 : DType::bf16);
  });
  m.def(
      "attention",
      [](const InputArray& q, const InputArray& k, const InputArray& v, const OutputArray& o,
         const std::optional<OutputArray>& lse, const Policy& policy, bool causal,
         const std::string& alignment, std::optional<double> scale, const std::string& layout,
         std::uintptr_t stream, std::int64_t window_left, std::int64_t window_right, double softcap,
         const std::optional<InputArray>& mask, const std::string& mask_kind) {
        attention_released(call_args(q, k, v, o, lse, policy, causal, alignment, scale, layout, stream,
                                     ScoreModArgs{window_left, window_right, softcap, mask, mask_kind}));
      },
      "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "policy"_a, "causal"_a, "causal_alignment"_a,
      "scale"_a.none(), "layout"_a, "stream"_a, "window_left"_a = -1, "window_right"_a = -1,
      "softcap"_a = 0.0, "mask"_a.none() = nb::none(), "mask_kind"_a = "none",
      "Runs pasa::attention on DLPack arrays, writing `out` (and `lse` when given).");
  nb::class_<PlannedAttention>(m, "PlannedAttention",
                               "An AttentionPlan for one problem, run on data pointers alone (unchecked: "
                               "the caller keys plans on the shapes, strides, dtypes, devices and options).")
      .def(
          "__init__",
          [](PlannedAttention* self, const InputArray& q, const InputArray& k, const InputArray& v,
             const OutputArray& o, const std::optional<OutputArray>& lse, const Policy& policy, bool causal,
             const std::string& alignment, std::optional<double> scale, const std::string& layout,
             std::int64_t window_left, std::int64_t window_right, double softcap) {
            new (self) PlannedAttention(call_args(q, k, v, o, lse, policy, causal, alignment, scale, layout, 0,
                                                  ScoreModArgs{window_left, window_right, softcap, {}, "none"}));
          },
          "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "policy"_a, "causal"_a, "causal_alignment"_a,
          "scale"_a.none(), "layout"_a, "window_left"_a = -1, "window_right"_a = -1, "softcap"_a = 0.0)
      .def_prop_ro("workspace_bytes", &PlannedAttention::workspace_bytes)
      .def("run", &PlannedAttention::run, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "workspace"_a, "stream"_a,
           "Runs the planned problem on these data pointers (0 for no LSE) and workspace, on `stream`.");
  m.def(
      "reference",
      [](const InputArray& q, const InputArray& k, const InputArray& v, const Policy& policy,
         bool causal, const std::string& alignment, std::optional<double> scale,
         const std::string& layout, std::int64_t window_left, std::int64_t window_right,
         double softcap, const std::optional<InputArray>& mask, const std::string& mask_kind) {
        return reference(q, k, v, policy, causal, alignment, scale, layout,
                         ScoreModArgs{window_left, window_right, softcap, mask, mask_kind});
      },
      "q"_a, "k"_a, "v"_a, "policy"_a, "causal"_a, "causal_alignment"_a, "scale"_a.none(),
      "layout"_a, "window_left"_a = -1, "window_right"_a = -1, "softcap"_a = 0.0,
      "mask"_a.none() = nb::none(), "mask_kind"_a = "none",
      "fp64 reference attention; returns (o [B, H, S, D], lse [B, H, S]) as float64 NumPy arrays.");
}

}  // namespace pasa::python
