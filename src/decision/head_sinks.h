#pragma once
// Each decision's sink, chosen once at start: the joint head on the GPU where the backbone runs there (the rows
// never leave the device: cuda/device_head.h), else the host head (HeadInputGatherer, its products on the backend
// when it offers them). DUET_DEVICE_HEAD=0 keeps the host head on a GPU, for comparisons.
#include <memory>

#include "decision/encoder.h"
#include "decision/joint_head.h"
#include "engine/decision_sink.h"
#include "model/model.h"

namespace duet::decision {

namespace cuda {
class DeviceJointHead;
}

class HeadSinks {
 public:
  HeadSinks(std::shared_ptr<const JointHead> head, const model::Model& backbone);
  ~HeadSinks();
  HeadSinks(const HeadSinks&) = delete;
  HeadSinks& operator=(const HeadSinks&) = delete;

  std::shared_ptr<engine::DecisionSink> make(const Encoding& encoding) const;
  bool on_device() const { return device_ != nullptr; }
  const std::shared_ptr<const JointHead>& head() const { return head_; }

 private:
  std::shared_ptr<const JointHead> head_;
  const model::Model& backbone_;
  std::unique_ptr<cuda::DeviceJointHead> device_;
};

}  // namespace duet::decision
