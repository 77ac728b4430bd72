// SPDX-License-Identifier: Apache-2.0
// pasa._core.Policy: the C++ Policy with read-only fields, its text form and the presets (the
// public pasa.Policy in python/pasa/_policy.py wraps it); and solve_beta, PASA's optimal beta.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "pasa/beta.h"
#include "pasa/policy.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace pasa::python {
namespace {

const char* scale_placement_name(ScalePlacement s) {
  switch (s) {
    case ScalePlacement::scores: return "scores";
    case ScalePlacement::query: return "query";
    case ScalePlacement::key: return "key";
  }
  return "?";
}

template <Format Policy::*Member>
std::string format_name(const Policy& p) {
  return (p.*Member).name();
}

}  // namespace

void bind_policy(nb::module_& m) {
  nb::class_<Policy>(m, "Policy")
      .def_static("parse", [](const std::string& text) { return parse_policy(text); }, "text"_a)
      .def_static("from_preset", [](const std::string& name) { return preset_policy(name); },
                  "name"_a)
      .def_static("preset_names", &preset_names)
      .def("to_string", [](const Policy& p) { return to_string(p); })
      .def("__eq__", [](const Policy& a, const Policy& b) { return a == b; })
      .def_prop_ro("preset", [](const Policy& p) { return p.preset; })
      .def_prop_ro("input", &format_name<&Policy::input>)
      .def_prop_ro("qk_acc", &format_name<&Policy::qk_acc>)
      .def_prop_ro("s", &format_name<&Policy::s>)
      .def_prop_ro("scale_placement", [](const Policy& p) { return scale_placement_name(p.scale); })
      .def_prop_ro("softmax", &format_name<&Policy::softmax>)
      .def_prop_ro("p", &format_name<&Policy::p>)
      .def_prop_ro("pv_acc", &format_name<&Policy::pv_acc>)
      .def_prop_ro("o", &format_name<&Policy::o>)
      .def_prop_ro("shift", [](const Policy& p) { return p.shift == Shift::pasa ? "pasa" : "none"; })
      .def_prop_ro("beta", [](const Policy& p) { return p.beta; })
      .def_prop_ro("block_q", [](const Policy& p) { return p.block_q; })
      .def_prop_ro("block_kv", [](const Policy& p) { return p.block_kv; });

  // (initial, beta, invariance, invariance_rounded, iterations); pasa.beta makes it a dataclass.
  m.def(
      "solve_beta",
      [](double initial, const std::string& format, int block, std::optional<double> scale) {
        const BetaSolution s = solve_beta(initial, parse_format(format), block, scale);
        return nb::make_tuple(s.initial, s.beta, s.invariance, s.invariance_rounded, s.iterations);
      },
      "initial"_a, "format"_a, "block"_a, "scale"_a.none());
}

}  // namespace pasa::python
