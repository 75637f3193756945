#pragma once
// The ApiError a call throws, for tests that check a refusal's status, code and param.
#include <gtest/gtest.h>

#include "server/errors.h"

namespace duet::server {

// The ApiError `f` throws, or a test failure (and an empty error) when it throws nothing.
template <typename F>
ApiError error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& error) {
    return error;
  }
  ADD_FAILURE() << "no error thrown";
  return ApiError(0, "");
}

}  // namespace duet::server
