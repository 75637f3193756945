#pragma once
// joint_head_config.json: the shape of the Clef joint schema head. Clef-Flash: {"hidden_size": 4096, "width": 1024,
// "routing_layers": 2, "layers": 4, "heads": 16, "feedforward": 4096}.
#include <cstdint>
#include <string>

namespace duet::decision {

struct JointHeadConfig {
  int64_t hidden_size = 0;     // h: the backbone's hidden size (the final-norm rows' width)
  int64_t width = 0;           // w: the head's own width
  int64_t routing_layers = 0;  // evidence layers: options attend to the prompt's memory
  int64_t layers = 0;          // decoder layers over the questions
  int64_t heads = 0;           // attention heads of width / heads
  int64_t feedforward = 0;     // f: feed-forward width

  // Reads and checks the file: exactly these six keys, positive integers, width divisible by heads. Throws
  // duet::Error naming the file and the key.
  static JointHeadConfig load(const std::string& path);
};

}  // namespace duet::decision
