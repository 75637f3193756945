#pragma once
// LAPACK and BLAS for `duet adapter`, loaded the first time they are needed (dlopen) instead of linked into duet:
// the server never pays for them. Linked, OpenBLAS (35 MB with LAPACK and gfortran: too much for the GPU machine's
// pack) would start its worker threads before main() with no signal blocked, and one of them could take the SIGTERM
// that `duet serve` waits for on a thread of its own.
#include <cblas.h>
#include <lapacke.h>

namespace duet::convert {

struct LinearAlgebra {
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&LAPACKE_sgeqrf) sgeqrf = nullptr;
  decltype(&LAPACKE_sorgqr) sorgqr = nullptr;
  decltype(&LAPACKE_sgesdd) sgesdd = nullptr;
};

// Loads them once (thread-safe): cblas_sgemm from OpenBLAS (or any libblas.so.3), LAPACKE from liblapacke.so.3.
// Refuses naming the library and the Debian package that provides it when one is missing.
const LinearAlgebra& linear_algebra();

}  // namespace duet::convert
