#pragma once
// A test fixture that loads the bundled demo model (models/demo: a tiny trained Qwen3.5 with its MTP layer, and its
// byte-level BPE tokenizer) once per suite; a test fails naming the folder when it is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../tests_dir.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace duet::engine::testing {

class DemoModelTest : public ::testing::Test {
 public:
  static inline const std::string kDemoDir = ::duet::testing::tests_dir() + "/../models/demo";

  static void SetUpTestSuite() { load("cpu"); }
  // The demo on `backend` (tests/cuda loads it on "cuda"), once per suite.
  static void load(const std::string& backend) {
    if (!std::filesystem::exists(kDemoDir + "/tokenizer.json")) return;
    model_ = model::Model::load(kDemoDir, backend).release();
    tokenizer_ = tokenizer::Tokenizer::load_dir(kDemoDir).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
    model_ = nullptr;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) FAIL() << "demo model missing: " << kDemoDir;
  }

  static inline model::Model* model_ = nullptr;
  static inline tokenizer::Tokenizer* tokenizer_ = nullptr;
};

}  // namespace duet::engine::testing
