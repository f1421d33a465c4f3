// TRAINMEM_SIMD_CLONES: a kernel's hot loop compiled three times, for AVX-512, AVX2 and the baseline
// x86-64 (SSE2), the copy run picked once by the CPU (GCC's target_clones: an ifunc resolved at
// load time). The loops vectorize 16, 8 or 4 floats at a time.
//
// Policy: the same bits on every machine. The project builds for baseline x86-64 (no -march), so
// its binaries run anywhere and give the same results anywhere; a clone may only change how many
// elements one instruction computes, never what each element gets:
// - no FMA: the clones name avx512f and avx2, not fma, and the files are compiled with
//   -ffp-contract=off, so a * b + c stays two roundings as in the baseline;
// - no reordered sums: without -ffast-math the compiler vectorizes a loop only across independent
//   elements, never a floating-point sum (its order is part of its value);
// - +, -, *, /, sqrt are correctly rounded in every instruction set.
// Checked: GELU's outputs over 262,144 inputs hash the same from the AVX-512 and SSE2 copies; small's
// losses and gradient norms (fp32, bf16, fp16) are the same bits as before the clones.
//
// Only GCC on x86-64 (clang's sanitizer builds and other machines compile the one baseline copy).
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define TRAINMEM_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TRAINMEM_SIMD_CLONES
#endif
