#pragma once
// A test fixture that loads the real tiny model (tests/fixtures/models/tiny-text, random weights, vocab 512) once per
// suite; a test fails naming the folder when the fixture is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../tests_dir.h"
#include "model/model.h"

namespace duet::engine::testing {

class TinyModelTest : public ::testing::Test {
 protected:
  static inline const std::string kModelDir = ::duet::testing::tests_dir() + "/fixtures/models/tiny-text";

  static void SetUpTestSuite() {
    if (std::filesystem::exists(kModelDir + "/config.json")) model_ = model::Model::load(kModelDir).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (model_ == nullptr) FAIL() << "fixture model missing: " << kModelDir;
  }
  static int32_t vocab() { return static_cast<int32_t>(model_->config().vocab_size); }

  static inline model::Model* model_ = nullptr;
};

}  // namespace duet::engine::testing
