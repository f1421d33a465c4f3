#include "common/tensor/tensor.h"

#include <sstream>
#include <utility>

#include "common/util/checked_math.h"

namespace trainmem {

namespace {
// The tensor's bytes, numel * element size, checked: a shape whose product would pass 2^62 bytes
// (or wrap around) is refused with its name and shape. Negative dimensions are refused too.
std::uint64_t checked_nbytes(const std::vector<std::int64_t>& shape, DType dtype, const std::string& name) {
  std::string described = "tensor '" + name + "' [";
  bool has_zero = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw std::invalid_argument("tensor '" + name + "': negative dimension in its shape");
    has_zero = has_zero || shape[i] == 0;
    described += (i ? ", " : "") + std::to_string(shape[i]);
  }
  if (has_zero) return 0;
  described += "] x " + std::to_string(dtype_size(dtype)) + " bytes";
  std::uint64_t bytes = dtype_size(dtype);
  for (std::int64_t d : shape) bytes = checked_mul(bytes, static_cast<std::uint64_t>(d), described);
  return bytes;
}
}  // namespace

Tensor::Tensor(CachingAllocator& allocator, std::vector<std::int64_t> shape, DType dtype, MemoryCategory category,
               std::string name, StreamId stream)
    : allocator_(&allocator),
      shape_(std::move(shape)),
      dtype_(dtype),
      category_(category),
      name_(std::move(name)),
      stream_(stream) {
  data_ = allocator_->allocate(checked_nbytes(shape_, dtype_, name_), category_, stream_, name_);
}

Tensor Tensor::view(void* data, std::vector<std::int64_t> shape, DType dtype, MemoryCategory category,
                    std::string name) {
  Tensor t;
  checked_nbytes(shape, dtype, name);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.category_ = category;
  t.name_ = std::move(name);
  return t;
}

Tensor::Tensor(Tensor&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      shape_(std::move(other.shape_)),
      dtype_(other.dtype_),
      category_(other.category_),
      name_(std::move(other.name_)),
      stream_(other.stream_) {
  other.shape_.clear();
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    shape_ = std::move(other.shape_);
    other.shape_.clear();
    dtype_ = other.dtype_;
    category_ = other.category_;
    name_ = std::move(other.name_);
    stream_ = other.stream_;
  }
  return *this;
}

void Tensor::reset() {
  if (allocator_ && data_) allocator_->free(data_);  // a view (no allocator) owns nothing
  data_ = nullptr;
  allocator_ = nullptr;
  shape_.clear();
}

std::int64_t Tensor::numel() const {
  if (shape_.empty() && !allocator_ && !data_) return 0;  // an empty tensor
  std::int64_t n = 1;
  for (std::int64_t d : shape_) n *= d;
  return n;
}

void Tensor::check_element_size(std::size_t size) const {
  if (size != dtype_size(dtype_))
    throw std::logic_error("tensor '" + name_ + "' holds " + std::string(to_string(dtype_)) +
                           " elements; data_as<T>() needs a T of the same size");
}

std::string Tensor::describe() const {
  std::ostringstream out;
  out << name_ << ' ' << to_string(dtype_) << '[';
  for (std::size_t i = 0; i < shape_.size(); ++i) out << (i ? ", " : "") << shape_[i];
  out << "] " << to_string(category_);
  return out.str();
}

}  // namespace trainmem
