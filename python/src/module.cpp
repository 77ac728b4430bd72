// pasa._core: the nanobind extension under the `pasa` Python package. The package (python/pasa)
// is the public API; this module only converts DLPack arrays to pasa views and calls the C++ library.
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "pasa/error.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "pasa's C++ core (internal: use the `pasa` package)";
  // Policies stay referenced at interpreter exit from caches (the package's parse cache, graphs
  // torch.compile keeps); nanobind's exit-time leak report would only be noise for users.
  nb::set_leak_warnings(false);
  // Every pasa::Error becomes pasa.PasaError (a ValueError) with the C++ message unchanged.
  nb::exception<pasa::Error>(m, "PasaError", PyExc_ValueError);
  m.attr("__version__") = PASA_VERSION;
#ifdef PASA_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  pasa::python::bind_policy(m);
  pasa::python::bind_attention(m);
  pasa::python::bind_io(m);
}
