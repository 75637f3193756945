#include "convert/blas_threads.h"

extern "C" int blas_thread_shutdown_(void);  // OpenBLAS: joins its worker threads (driver/others/blas_server.c)

namespace duet::convert {

void stop_blas_threads() { blas_thread_shutdown_(); }

}  // namespace duet::convert
