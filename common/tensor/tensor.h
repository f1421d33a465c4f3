// A tensor: a shape, an element type, and storage owned by the caching allocator.
//
// The storage is allocated when the tensor is made and returned to the allocator when the tensor
// is destroyed (RAII), so the allocator's statistics follow the tensors' lifetimes exactly.
// Every tensor carries a name ("layer3.attn.probs") and a category (activations, ...), which is
// how memory figures are attributed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/allocator/caching_allocator.h"
#include "common/tensor/dtype.h"

namespace trainmem {


class Tensor {
 public:
  Tensor() = default;  // an empty tensor: no storage
  // Allocates numel(shape) * dtype_size(dtype) bytes from `allocator`. Throws OutOfMemoryError
  // when the device cannot hold it, std::invalid_argument for a negative dimension.
  Tensor(CachingAllocator& allocator, std::vector<std::int64_t> shape, DType dtype, MemoryCategory category,
         std::string name, StreamId stream = kDefaultStream);
  ~Tensor() { reset(); }
  // A tensor over memory someone else owns, e.g. one parameter's slice of a flat buffer (ZeRO-3
  // and FSDP gather a unit's parameters into one buffer and view each parameter inside it). A view
  // never frees; the owner must outlive it.
  static Tensor view(void* data, std::vector<std::int64_t> shape, DType dtype, MemoryCategory category,
                     std::string name);
  bool is_view() const { return allocator_ == nullptr && data_ != nullptr; }

  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;  // storage has one owner; copy data explicitly when meant
  Tensor& operator=(const Tensor&) = delete;

  void reset();  // returns the storage now (a view just forgets it); the tensor becomes empty
  bool defined() const { return data_ != nullptr || numel() == 0; }

  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::int64_t numel() const;
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  MemoryCategory category() const { return category_; }
  const std::string& name() const { return name_; }
  StreamId stream() const { return stream_; }

  void* data() { return data_; }
  const void* data() const { return data_; }
  // Typed access; T must match the dtype's size (float for f32, std::uint16_t for f16/bf16/u16, ...).
  template <typename T>
  T* data_as() {
    check_element_size(sizeof(T));
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data_as() const {
    check_element_size(sizeof(T));
    return static_cast<const T*>(data_);
  }

  std::string describe() const;  // e.g. "layer0.attn.probs f32[4, 12, 64, 64] activations"

 private:
  void check_element_size(std::size_t size) const;

  CachingAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  std::vector<std::int64_t> shape_;
  DType dtype_ = DType::f32;
  MemoryCategory category_ = MemoryCategory::other;
  std::string name_;
  StreamId stream_ = kDefaultStream;
};

}  // namespace trainmem
