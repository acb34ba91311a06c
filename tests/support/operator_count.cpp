#include "support/operator_count.h"

#include <sstream>

namespace t5scale::testing {

OperatorCount::OperatorCount() {
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            const std::string name = fn.name();
            if (name.rfind("aten::", 0) == 0) ++counts()[name];
            return nullptr;
          })
          .scopes({at::RecordScope::FUNCTION}));
}

OperatorCount::~OperatorCount() { at::removeCallback(handle_); }

std::map<std::string, int>& OperatorCount::counts() {
  static thread_local std::map<std::string, int> by_name;
  return by_name;
}

int OperatorCount::total() {
  int sum = 0;
  for (const auto& [name, count] : counts()) sum += count;
  return sum;
}

int OperatorCount::of(const std::string& name) {
  const auto found = counts().find(name);
  return found == counts().end() ? 0 : found->second;
}

std::string OperatorCount::listing() {
  std::ostringstream out;
  for (const auto& [name, count] : counts()) out << "  " << name << " " << count << "\n";
  return out.str();
}

}  // namespace t5scale::testing
