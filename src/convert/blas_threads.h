#pragma once
// OpenBLAS (the pthread build Debian installs) starts its worker threads when the library loads, before main(), with
// no signal blocked. `duet serve` takes SIGINT/SIGTERM with sigwait on a thread of its own, which needs every thread
// to block them: one OpenBLAS worker that does not would take the signal and let it kill the process. serve never
// calls BLAS, so it stops those threads first (OpenBLAS starts them again if BLAS is ever called).
namespace duet::convert {

void stop_blas_threads();

}  // namespace duet::convert
