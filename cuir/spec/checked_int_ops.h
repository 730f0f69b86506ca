// Checks in front of TorchScript's scalar int operators that divide.
#pragma once

namespace cubridge::spec::internal {

// LibTorch 1.13 runs `a % b` on ints as a bare C++ `%` (no zero check), and `//`, divmod and gcd
// divide INT64_MIN by -1: both raise SIGFPE, which kills the process. TorchScript evaluates such
// operators while it compiles (constant propagation: `score + 0 % 0`) and whenever the spec runs
// (`1 % w` with the parameter w = 0), so a spec could crash whoever loads it. Replaces those
// operators, once per process and before any spec is compiled, with ones that refuse a zero
// divisor with ZeroDivisionError (as Python) and give `INT64_MIN // -1` the wrapped result the
// CuIR interpreter computes. Thread-safe; later calls do nothing.
void InstallCheckedIntOps();

}  // namespace cubridge::spec::internal
