// Element types of tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainmem {

enum class DType {
  f32,   // float
  f16,   // IEEE half: 1 sign, 5 exponent, 10 mantissa bits
  bf16,  // bfloat16: 1 sign, 8 exponent, 7 mantissa bits (fp32's range, less precision)
  i32,
  u16,   // token ids (vocabularies up to 65536, as in the token file format)
  i64,
};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::u16: return 2;
    case DType::i64: return 8;
  }
  return 0;
}

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::u16: return "u16";
    case DType::i64: return "i64";
  }
  return "?";
}

}  // namespace trainmem
