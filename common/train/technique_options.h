// The options of every technique in one run, each kept in the technique's own type.
//
// A technique's options are a plain struct in its suite's folder (suites/checkpointing's
// RecomputePolicy, suites/fsdp's FsdpOptions, ...). TrainingSetup (training_setup.h) holds them
// here, found by their type, so a new technique adds no field to the setup and no include to
// common/: only its folder and its registration line know the struct.
//
//   setup.option<RecomputePolicy>() = RecomputePolicy::parse("full");   // set
//   if (setup.option<RecomputePolicy>().kind == ...)                    // read (the default when unset)
#pragma once
#include <any>
#include <map>
#include <typeindex>

namespace trainmem {

class TechniqueOptions {
 public:
  // The options of type T: the value set last, or T{} when none was set.
  template <typename T>
  const T& get() const {
    static const T defaults{};
    const auto it = values_.find(std::type_index(typeid(T)));
    return it == values_.end() ? defaults : std::any_cast<const T&>(it->second);
  }
  // The options of type T, to change (made from T{} the first time).
  template <typename T>
  T& edit() {
    std::any& value = values_[std::type_index(typeid(T))];
    if (!value.has_value()) value = T{};
    return std::any_cast<T&>(value);
  }

 private:
  std::map<std::type_index, std::any> values_;
};

}  // namespace trainmem
