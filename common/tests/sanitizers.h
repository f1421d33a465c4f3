// Whether this test binary runs under AddressSanitizer (the asan preset, ci/sanitize). A few long
// tests repeat at length what other tests run under the sanitizers; there they skip, saying so,
// and they run in full in every other build (ci/test's first ctest, its numerical reruns).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define TRAINMEM_UNDER_SANITIZERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAINMEM_UNDER_SANITIZERS 1
#endif
#endif
#ifndef TRAINMEM_UNDER_SANITIZERS
#define TRAINMEM_UNDER_SANITIZERS 0
#endif

// In a test body or SetUp: skips, with `why` (what covers it under the sanitizers), in the
// sanitizer build only.
#define TRAINMEM_SKIP_UNDER_SANITIZERS(why) \
  if (TRAINMEM_UNDER_SANITIZERS) GTEST_SKIP() << "skipped under the sanitizers (a long run, covered there by " << why << ")"
