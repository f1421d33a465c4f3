# The CPU GEMM library: the target trainmem_cpu_blas, which kernels/ links (kernels/cpu/blas_library.h).
#
#   TRAINMEM_CPU_BLAS=auto      (default) oneMKL where ci/setup installed it, else OpenBLAS
#   TRAINMEM_CPU_BLAS=mkl       oneMKL, or an error saying how to install it
#   TRAINMEM_CPU_BLAS=openblas  OpenBLAS (Debian's libopenblas-dev)
#
# Why oneMKL first (issue 41, kernels/cpu/speed.md "Fourth round"): which of OpenBLAS's kernel
# families is fast depends on the CPU (on one AVX-512 Xeon its own choice, SkylakeX, made a step's
# products 2x slower than its Haswell kernels; on another it was 1.5x faster), and trainmem never
# sets OPENBLAS_CORETYPE for a user. oneMKL is what PyTorch's CPU products run on: at least as fast
# as OpenBLAS's best on every product of a step we measured, and, beside PyTorch, the same GEMM on
# whatever CPU the user has. Its sequential layer is linked (libmkl_sequential): oneMKL never starts
# a thread; trainmem splits a product over its own thread pool (kernels/cpu/matmul.cpp), so the
# bits do not depend on the thread count.
#
# oneMKL comes from PyPI (the wheels mkl and mkl-include, pinned in ci/setup) into .deps/mkl:
# TRAINMEM_MKL_ROOT points elsewhere (a folder with lib/libmkl_core.so.* and include/mkl_cblas.h).
# The build's summary line, build/<preset>/cpu_blas.txt, names the choice (ci/test reads it to pick the
# second kernel family of the numerical tests).
set(TRAINMEM_CPU_BLAS auto CACHE STRING "The CPU GEMM library: auto (oneMKL where installed, else OpenBLAS), mkl or openblas")
set_property(CACHE TRAINMEM_CPU_BLAS PROPERTY STRINGS auto mkl openblas)
set(TRAINMEM_MKL_ROOT "${PROJECT_SOURCE_DIR}/.deps/mkl" CACHE PATH "Where oneMKL is (lib/ and include/; ci/setup installs it here)")

if(NOT TRAINMEM_CPU_BLAS MATCHES "^(auto|mkl|openblas)$")
  message(FATAL_ERROR "TRAINMEM_CPU_BLAS=${TRAINMEM_CPU_BLAS}: must be auto, mkl or openblas")
endif()

# oneMKL's three libraries for the LP64 interface and the sequential layer, by their versioned names
# (PyPI's wheel has no unversioned symlinks to link against).
set(trainmem_mkl_libraries)
set(trainmem_mkl_found FALSE)
if(NOT TRAINMEM_CPU_BLAS STREQUAL "openblas")
  set(trainmem_mkl_found TRUE)
  foreach(part intel_lp64 sequential core)
    file(GLOB candidates "${TRAINMEM_MKL_ROOT}/lib/libmkl_${part}.so.[0-9]*")
    list(SORT candidates)
    list(LENGTH candidates n)
    if(n EQUAL 0)
      set(trainmem_mkl_found FALSE)
    else()
      list(GET candidates -1 library)
      list(APPEND trainmem_mkl_libraries "${library}")
    endif()
  endforeach()
  if(NOT EXISTS "${TRAINMEM_MKL_ROOT}/include/mkl_cblas.h")
    set(trainmem_mkl_found FALSE)
  endif()
  if(TRAINMEM_CPU_BLAS STREQUAL "mkl" AND NOT trainmem_mkl_found)
    message(FATAL_ERROR "TRAINMEM_CPU_BLAS=mkl: no oneMKL in ${TRAINMEM_MKL_ROOT} (lib/libmkl_{intel_lp64,sequential,core}.so.* "
                        "and include/mkl_cblas.h): run ci/setup, set TRAINMEM_MKL_ROOT, or choose TRAINMEM_CPU_BLAS=openblas")
  endif()
endif()

add_library(trainmem_cpu_blas INTERFACE)
set(TRAINMEM_CPU_BLAS_RUNTIME_DIR "")
if(trainmem_mkl_found)
  set(TRAINMEM_CPU_BLAS_LIBRARY mkl)
  target_include_directories(trainmem_cpu_blas SYSTEM INTERFACE "${TRAINMEM_MKL_ROOT}/include")
  target_link_libraries(trainmem_cpu_blas INTERFACE ${trainmem_mkl_libraries})
  target_compile_definitions(trainmem_cpu_blas INTERFACE TRAINMEM_CPU_BLAS_MKL=1)
  # An installed program's run path must name it: INSTALL_RPATH_USE_LINK_PATH leaves out folders
  # inside the project, as .deps/ is (suites/trainmem/CMakeLists.txt adds this one).
  set(TRAINMEM_CPU_BLAS_RUNTIME_DIR "${TRAINMEM_MKL_ROOT}/lib")
  message(STATUS "trainmem: CPU GEMM on oneMKL, sequential layer (${TRAINMEM_MKL_ROOT})")
else()
  find_package(OpenBLAS CONFIG REQUIRED)
  set(TRAINMEM_CPU_BLAS_LIBRARY openblas)
  # SYSTEM: OpenBLAS's own header is not warning-free under clang -Wpedantic (C99 _Complex in C++).
  target_include_directories(trainmem_cpu_blas SYSTEM INTERFACE ${OpenBLAS_INCLUDE_DIRS})
  target_link_libraries(trainmem_cpu_blas INTERFACE ${OpenBLAS_LIBRARIES})
  message(STATUS "trainmem: CPU GEMM on OpenBLAS (${OpenBLAS_LIBRARIES})")
  if(TRAINMEM_CPU_BLAS STREQUAL "auto")
    message(STATUS "trainmem: (no oneMKL in ${TRAINMEM_MKL_ROOT}: ci/setup installs it)")
  endif()
endif()
file(WRITE "${CMAKE_BINARY_DIR}/cpu_blas.txt" "${TRAINMEM_CPU_BLAS_LIBRARY}\n")
