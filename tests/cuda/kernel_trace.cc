// A kernel timeline of any CUDA program, for the GPU machine, where Nsight Systems cannot make a report
// (docs/benchmarks.md, 36th round): loaded by the CUDA driver as an injection library
// (CUDA_INJECTION64_PATH=libkernel_trace.so), it asks CUPTI for every kernel's start and end on the GPU's clock,
// graph nodes and dependent launches included (the concurrent-kernel activity kind, which does not serialize
// launches as the plain kernel kind does), and writes one line a kernel to DUET_KERNEL_TRACE (default
// kernel_trace.tsv): start_ns, end_ns, stream, graph node, demangled name. tools/kernel_trace_summary.py turns it
// into a step's busy and idle time and each kernel's share. Nothing here is linked into duet.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

namespace {

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kRecordAlign = 8;

std::mutex out_mutex;
FILE* out = nullptr;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  std::fprintf(stderr, "kernel_trace: %s: %s\n", what, text ? text : "unknown CUPTI error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

// A kernel's name as written in the source (templates included) where it demangles, else as stored.
void write_kernel(const CUpti_ActivityKernel10& kernel) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(kernel.name, nullptr, nullptr, &status),
                                                        &std::free);
  const char* name = status == 0 && demangled ? demangled.get() : kernel.name;
  std::fprintf(out, "%llu\t%llu\t%u\t%llu\t%s\n", static_cast<unsigned long long>(kernel.start),
               static_cast<unsigned long long>(kernel.end), kernel.streamId,
               static_cast<unsigned long long>(kernel.graphNodeId), name ? name : "?");
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  {
    std::lock_guard lock(out_mutex);
    CUpti_Activity* record = nullptr;
    while (out && cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        write_kernel(*reinterpret_cast<const CUpti_ActivityKernel10*>(record));
      }
    }
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    if (dropped != 0) std::fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
  }
  std::free(buffer);
}

void flush_at_exit() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard lock(out_mutex);
  if (out) std::fclose(out);
  out = nullptr;
}

}  // namespace

// Called by the CUDA driver once, at its initialization, when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  const char* path = std::getenv("DUET_KERNEL_TRACE");
  out = std::fopen(path ? path : "kernel_trace.tsv", "w");
  if (!out) {
    std::perror("kernel_trace: cannot open the output");
    return 0;
  }
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel activity");
  std::atexit(flush_at_exit);
  return 1;
}
