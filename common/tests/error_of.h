// The message of the exception a piece of code throws, for tests that check what an error says.
#pragma once
#include <functional>
#include <string>

namespace trainmem::testing_support {

// What `f` throws as E (its what()); "no error" when it throws nothing. Anything else escapes,
// and the test fails on it.
template <typename E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace trainmem::testing_support
