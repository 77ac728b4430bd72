// SPDX-License-Identifier: Apache-2.0
// pasa._core.attention and pasa._core.reference: DLPack arrays in, pasa::attention /
// pasa::reference_attention out. Outputs are allocated by the caller (Python), so nothing here
// allocates device memory: CUDA work goes on the stream the caller passes, CUDA-graph friendly.
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
#include "pasa/attention.h"
#include "pasa/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace pasa::python {
namespace {

CausalAlignment parse_alignment(const std::string& text) {
  if (text == "bottom_right") return CausalAlignment::bottom_right;
  if (text == "top_left") return CausalAlignment::top_left;
  throw Error("causal_alignment: '" + text + "' is not 'bottom_right' or 'top_left'");
}

// q, k, v (and o when given) as views, each checked on its own and for its device.
AttentionArgs make_args(const InputArray& q, const InputArray& k, const InputArray& v,
                        const Policy& policy, bool causal, const std::string& alignment,
                        std::optional<double> scale, const std::string& layout_text) {
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
  return args;
}

void attention(const InputArray& q, const InputArray& k, const InputArray& v, const OutputArray& o,
               const std::optional<OutputArray>& lse, const Policy& policy, bool causal,
               const std::string& alignment, std::optional<double> scale, const std::string& layout,
               std::uintptr_t stream) {
  AttentionArgs args = make_args(q, k, v, policy, causal, alignment, scale, layout);
  const ArrayInfo inputs[] = {array_info(q), array_info(k), array_info(v)};
  const char* input_names[] = {"q", "k", "v"};
  const ArrayInfo oi = array_info(o);
  args.o = attention_view(oi, "out", parse_layout(layout));
  check_same_device(inputs[0], oi, "out");
  for (int i = 0; i < 3; ++i) check_no_overlap(oi, "out", inputs[i], input_names[i]);
  if (lse) {
    const ArrayInfo li = array_info(*lse);
    args.lse = lse_output_view(li);
    check_same_device(inputs[0], li, "lse");
    for (int i = 0; i < 3; ++i) check_no_overlap(li, "lse", inputs[i], input_names[i]);
    check_no_overlap(li, "lse", oi, "out");
  }
  args.stream = reinterpret_cast<void*>(stream);
  nb::gil_scoped_release release;  // q, k, v, o stay alive: the ndarrays hold references
  pasa::attention(args);
}

// A NumPy float64 array that owns `values`.
nb::object numpy_f64(std::vector<double>&& values, std::vector<std::size_t> shape) {
  auto* owned = new std::vector<double>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  return nb::ndarray<nb::numpy, double>(owned->data(), shape.size(), shape.data(), owner).cast();
}

nb::tuple reference(const InputArray& q, const InputArray& k, const InputArray& v,
                    const Policy& policy, bool causal, const std::string& alignment,
                    std::optional<double> scale, const std::string& layout) {
  AttentionArgs args = make_args(q, k, v, policy, causal, alignment, scale, layout);
  // reference_attention returns its own buffers and ignores o, but the shared argument checks
  // want a well-formed o: describe q's shape over q's memory (never written).
  args.o = bhsd_view(args.q.data, args.q.dtype, args.q.shape[0], args.q.shape[1], args.q.shape[2],
                     args.q.shape[3], args.q.device);
  ReferenceResult result;
  {
    nb::gil_scoped_release release;
    result = reference_attention(args);
  }
  const auto& s = args.q.shape;
  const auto B = static_cast<std::size_t>(s[0]), H = static_cast<std::size_t>(s[1]),
             S = static_cast<std::size_t>(s[2]), D = static_cast<std::size_t>(s[3]);
  nb::object o = numpy_f64(std::move(result.o), {B, H, S, D});
  nb::object lse = numpy_f64(std::move(result.lse), {B, H, S});
  return nb::make_tuple(o, lse);
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("attention", &attention, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "policy"_a,
        "causal"_a, "causal_alignment"_a, "scale"_a.none(), "layout"_a, "stream"_a,
        "Runs pasa::attention on DLPack arrays, writing `out` (and `lse` when given).");
  m.def("reference", &reference, "q"_a, "k"_a, "v"_a, "policy"_a, "causal"_a, "causal_alignment"_a,
        "scale"_a.none(), "layout"_a,
        "fp64 reference attention; returns (o [B, H, S, D], lse [B, H, S]) as float64 NumPy arrays.");
}

}  // namespace pasa::python
