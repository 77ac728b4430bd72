// SPDX-License-Identifier: Apache-2.0
// pasa._core.Policy: the C++ Policy, its text form, its field table and the presets (the public
// pasa.Policy in python/pasa/_policy.py wraps it); and solve_beta, PASA's optimal beta.
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

void bind_policy(nb::module_& m) {
  // Every field is read through `get(key)`, by the text keys of policy_fields(): the Python Policy
  // builds its attributes from that table, so no field list is written twice.
  nb::class_<Policy>(m, "Policy")
      .def_static("parse", [](const std::string& text) { return parse_policy(text); }, "text"_a)
      .def_static("from_preset", [](const std::string& name) { return preset_policy(name); },
                  "name"_a)
      .def_static("preset_names", &preset_names)
      .def("to_string", [](const Policy& p) { return to_string(p); })
      .def("__eq__", [](const Policy& a, const Policy& b) { return a == b; })
      .def_prop_ro("preset", [](const Policy& p) { return p.preset; })
      .def("get", [](const Policy& p, const std::string& key) { return field_value(p, key); }, "key"_a);

  // [(key, kind, choices, doc)] in printing order.
  m.def("policy_fields", [] {
    nb::list out;
    for (const PolicyField& f : policy_fields()) {
      out.append(nb::make_tuple(f.key, field_kind_name(f.kind), f.choices, f.doc));
    }
    return out;
  });

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
