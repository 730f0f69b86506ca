// InstallCheckedIntOps: re-registers TorchScript's scalar int operators that divide, wrapped.
#include "cuir/spec/checked_int_ops.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include <torch/csrc/jit/runtime/operator.h>

namespace cubridge::spec::internal {
namespace {

using torch::jit::Stack;

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// The two operands on top of the stack, when both are ints.
std::optional<std::pair<int64_t, int64_t>> IntOperands(const Stack& stack) {
  if (stack.size() < 2) return std::nullopt;
  const c10::IValue& a = torch::jit::peek(stack, 0, 2);
  const c10::IValue& b = torch::jit::peek(stack, 1, 2);
  if (!a.isInt() || !b.isInt()) return std::nullopt;
  return std::make_pair(a.toInt(), b.toInt());
}

int64_t WrappedNegation(int64_t a) {
  return static_cast<int64_t>(0 - static_cast<uint64_t>(a));
}

// Where LibTorch's int arithmetic would trap, the result (as Python computes it, or wrapped when
// it does not fit) replaces the operands on the stack; true then. False: the original runs.
using Check = bool (*)(Stack& stack, int64_t a, int64_t b);

[[noreturn]] void ZeroDivision() {
  throw std::runtime_error("ZeroDivisionError: integer division or modulo by zero");
}

void Replace(Stack& stack, c10::IValue result) {
  torch::jit::drop(stack, 2);
  stack.push_back(std::move(result));
}

bool CheckRemainder(Stack& stack, int64_t a, int64_t b) {
  if (b == 0) ZeroDivision();
  if (b != -1) return false;
  Replace(stack, int64_t{0});
  return true;
}

bool CheckFloorDiv(Stack& stack, int64_t a, int64_t b) {
  if (b != -1) return false;  // LibTorch checks for zero itself
  Replace(stack, WrappedNegation(a));
  return true;
}

bool CheckDivmod(Stack& stack, int64_t a, int64_t b) {
  if (b != -1) return false;
  torch::jit::drop(stack, 2);
  stack.emplace_back(WrappedNegation(a));
  stack.emplace_back(int64_t{0});
  return true;
}

bool CheckGcd(Stack& stack, int64_t a, int64_t b) {
  if (a != -1 && b != -1) return false;  // -1 is what can meet INT64_MIN in Euclid's loop
  Replace(stack, int64_t{1});
  return true;
}

struct Wrapped {
  const char* name;
  const char* overload;  // "" for the Scalar (number) one
  Check check;
};

constexpr Wrapped kWrapped[] = {
    {"aten::remainder", "int", CheckRemainder}, {"aten::remainder", "", CheckRemainder},
    {"aten::floordiv", "int", CheckFloorDiv},   {"aten::floordiv", "", CheckFloorDiv},
    {"aten::divmod", "int", CheckDivmod},       {"aten::gcd", "int", CheckGcd},
};

Check CheckFor(const c10::FunctionSchema& schema) {
  for (const Wrapped& w : kWrapped) {
    if (schema.name() == w.name && schema.overload_name() == w.overload) return w.check;
  }
  return nullptr;
}

// Re-registers the JIT (non-dispatcher) overloads of `name` in their order, which TorchScript's
// overload resolution depends on (`aten::remainder.int` must still come before the Scalar one).
// They sit after the dispatcher's Tensor overloads, so they stay in place relative to those too.
void Rewrap(const char* name) {
  std::vector<std::shared_ptr<torch::jit::Operator>> jit_ops;
  for (const auto& op : torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(name))) {
    if (!op->isC10Op()) jit_ops.push_back(op);
  }
  for (const auto& op : jit_ops) torch::jit::deregisterOperator(op->schema());
  for (const auto& op : jit_ops) {
    torch::jit::Operation original = op->getOperation();
    const Check check = CheckFor(op->schema());
    // `op` stays referenced: graphs compiled before may still point at it.
    torch::jit::registerOperator(torch::jit::Operator(
        c10::toString(op->schema()),
        [op, original, check](Stack& stack) mutable {
          if (check != nullptr) {
            if (auto ab = IntOperands(stack); ab && check(stack, ab->first, ab->second)) return;
          }
          original(stack);
        },
        op->aliasAnalysisKind()));
  }
}

}  // namespace

void InstallCheckedIntOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"aten::remainder", "aten::floordiv", "aten::divmod", "aten::gcd"}) {
      Rewrap(name);
    }
  });
}

}  // namespace cubridge::spec::internal
