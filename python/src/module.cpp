// SPDX-License-Identifier: Apache-2.0
// pasa._core: the nanobind extension under the `pasa` Python package. The package (python/pasa)
// is the public API; this module only converts DLPack arrays to pasa views and calls the C++ library.
#include <nanobind/nanobind.h>

#include <exception>
#include <string_view>

#include "bindings.h"
#include "pasa/error.h"
#include "pasa/version.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "pasa's C++ core (internal: use the `pasa` package)";
  // Policies stay referenced at interpreter exit from caches (the package's parse cache, graphs
  // torch.compile keeps); nanobind's exit-time leak report would only be noise for users.
  nb::set_leak_warnings(false);
  // Every pasa::Error (ResourceError included) becomes pasa.PasaError (a ValueError) with the C++
  // message. Messages can quote bytes of an untrusted file that are not UTF-8: those are shown as
  // backslash escapes rather than failing the conversion with a UnicodeDecodeError.
  static nb::exception<pasa::Error> pasa_error(m, "PasaError", PyExc_ValueError);
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* type) {
        try {
          std::rethrow_exception(p);
        } catch (const pasa::Error& e) {
          const std::string_view what = e.what();
          PyObject* message =
              PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "backslashreplace");
          PyErr_SetObject(static_cast<PyObject*>(type), message);
          Py_XDECREF(message);
        }
      },
      pasa_error.ptr());
  m.attr("__version__") = pasa::version();
#ifdef PASA_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  pasa::python::bind_policy(m);
  pasa::python::bind_attention(m);
  pasa::python::bind_io(m);
  pasa::python::bind_serving(m);
}
