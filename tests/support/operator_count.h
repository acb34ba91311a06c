// The ATen operators this thread dispatches while an OperatorCount lives, by name, counted through RecordFunction
// (every operator, nested ones included: a composite that decomposes into more kernels counts them).
#pragma once

#include <ATen/record_function.h>

#include <map>
#include <string>

namespace t5scale::testing {

class OperatorCount {
 public:
  OperatorCount();
  ~OperatorCount();
  OperatorCount(const OperatorCount&) = delete;
  OperatorCount& operator=(const OperatorCount&) = delete;

  // Counts so far on this thread (cleared by clear(); shared by every OperatorCount of the thread).
  static std::map<std::string, int>& counts();
  static void clear() { counts().clear(); }
  static int total();
  static int of(const std::string& name);  // "aten::copy_"
  static std::string listing();             // "  aten::add 3\n..."

 private:
  at::CallbackHandle handle_;
};

}  // namespace t5scale::testing
