// A cheap lexical guard run on a spec's bytes before anything parses them.
//
// LibTorch's TorchScript parser and emitter recurse once per nesting level of an expression (and
// per link of a long operator or attribute chain), and a deep enough spec overflows the stack:
// a 20 KB file whose mask_mod returns 10000 nested parentheses kills the process (SIGSEGV). This
// guard bounds every construct that makes TorchScript (or the translation after it) recurse,
// with limits far above what attention variants use, so that what reaches LibTorch is shallow.
//
// It lexes Python just enough to be right on real specs: strings (single, double, triple-quoted,
// escapes, prefixes), comments, explicit and implicit line continuations, indentation. It never
// recurses and runs in time linear in the input, on any bytes. No LibTorch: the coordinator and
// the fuzzers use it without it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace cubridge::spec {

struct GuardLimits {
  // ( [ { open at once. TorchScript recurses per level; real specs nest 3 or 4 deep.
  int max_bracket_depth = 32;
  // Prefix operators in a row (`- - -x`, `~~m`, `not not c`): each one is a recursion level
  // that no bracket shows.
  int max_unary_run = 8;
  // Operators in one statement (a logical line). A flat chain `a + 0 + 0 ...` has no nesting,
  // yet parses into a tree as deep as it is long, which the emitter walks recursively.
  int max_operators_per_statement = 256;
  // Operators in the file, and in any one function once the helpers it calls are inlined (a
  // helper called twice counts twice, so helpers calling helpers cannot grow the inlined graph
  // exponentially). Bounds how long a chain of values computed from values can be, which the
  // translation to CuIR follows recursively: about 1500 links overflow it under ASan. The
  // example specs use at most 35.
  int max_operators_total = 512;
  // Nested blocks (`def`, then `if`/`for`/`while` in a reference function), an `elif` counting
  // as a block in the `if` before it, as TorchScript parses it.
  int max_block_depth = 32;
  // Line breaks with no token between them (blank lines, comment lines, `\` continuations):
  // TorchScript's lexer recurses once per line it skips (it overflows near 30000).
  int max_lines_without_code = 1000;
  // TorchScript's errors quote the offending lines, and the frontend reads them with a regex
  // that recurses once per character (it overflows near 30000).
  size_t max_line_bytes = 1024;
  // Parts a value may have: a bound on a tuple's length, counted as the sum of what an
  // expression reads (guard.cc says how). TorchScript joins tuples element by element, so a
  // spec that doubles a tuple per statement compiles in exponential time; real specs stay
  // under 50.
  int64_t max_value_parts = 1024;
  size_t max_source_bytes = 256 * 1024;
};

// OK, or INVALID_ARGUMENT "path:LINE:COL: <what limit, the number found, the limit> (<how to
// fix>)" at the token where a limit is crossed. Positions count bytes like the spec frontend's.
//
// Operators counted: arithmetic (+ - * / // % ** @), comparisons (< > <= >= == != in, is, and
// their `not in` / `is not` forms), bitwise (& | ^ ~ << >>), boolean (and or not), the
// conditional expression's `if` and `else`, `lambda`, attribute access (`.`), and calls and
// subscripts (an opening bracket right after an operand): each of them adds a link to the parse
// tree that TorchScript walks recursively.
absl::Status GuardSpecSource(std::string_view source, const std::string& path,
                             const GuardLimits& limits = {});

}  // namespace cubridge::spec
