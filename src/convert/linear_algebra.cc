#include "convert/linear_algebra.h"

#include <dlfcn.h>

#include <initializer_list>
#include <string>

#include "base/error.h"

namespace duet::convert {

namespace {

// The first of `names` that loads; the handle is kept for the life of the process.
void* open_first(std::initializer_list<const char*> names, const char* package) {
  std::string tried;
  for (const char* name : names) {
    if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    tried += std::string(tried.empty() ? "" : ", ") + name;
  }
  fail("duet adapter needs {} ({}): none of {} loads", package, "apt-get install " + std::string(package), tried);
}

template <typename Function>
void bind(void* handle, const char* symbol, Function& out) {
  out = reinterpret_cast<Function>(dlsym(handle, symbol));
  if (out == nullptr) fail("duet adapter: {} not found in the loaded BLAS/LAPACK ({})", symbol, dlerror());
}

LinearAlgebra load() {
  LinearAlgebra la;
  void* blas = open_first({"libopenblas.so.0", "libblas.so.3"}, "libopenblas0");
  void* lapacke = open_first({"liblapacke.so.3"}, "liblapacke");
  bind(blas, "cblas_sgemm", la.sgemm);
  bind(lapacke, "LAPACKE_sgeqrf", la.sgeqrf);
  bind(lapacke, "LAPACKE_sorgqr", la.sorgqr);
  bind(lapacke, "LAPACKE_sgesdd", la.sgesdd);
  return la;
}

}  // namespace

const LinearAlgebra& linear_algebra() {
  static const LinearAlgebra loaded = load();  // thread-safe once
  return loaded;
}

}  // namespace duet::convert
