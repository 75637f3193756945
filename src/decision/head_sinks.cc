#include "decision/head_sinks.h"

#include "decision/head_inputs.h"
#if DUET_HAVE_CUDA
#include "decision/cuda/device_head.h"
#endif

namespace duet::decision {

#if !DUET_HAVE_CUDA
namespace cuda {
class DeviceJointHead {};  // this build has no CUDA backend: decisions always take the host head
}  // namespace cuda
#endif

HeadSinks::HeadSinks(std::shared_ptr<const JointHead> head, const model::Model& backbone)
    : head_(std::move(head)), backbone_(backbone) {
#if DUET_HAVE_CUDA
  if (backbone_.products_backend() != nullptr && cuda::device_head_wanted())
    device_ = std::make_unique<cuda::DeviceJointHead>(head_, backbone_);
#endif
}

HeadSinks::~HeadSinks() = default;

std::shared_ptr<engine::DecisionSink> HeadSinks::make(const Encoding& encoding) const {
#if DUET_HAVE_CUDA
  if (device_) return device_->new_sink(encoding);
#endif
  return std::make_shared<HeadInputGatherer>(head_, backbone_, encoding);
}

}  // namespace duet::decision
