// Int `//` and `%` in emitted CUDA (docs/lowering.md, "Integer division and modulo"): the form
// the emitter picks for the operands' ranges (a shift or a mask, C's own `/` and `%`, the
// positive-divisor helpers, the general helpers), and every one of them, compiled by nvcc (host
// code; the device side is compiled too), computing what cuir::EvalScalar computes with Python's
// semantics, over dividends that include negatives and the int limits. Without nvcc the second
// test is skipped (never passed).
#include <array>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cuir/ir/bounds.h"
#include "cuir/ir/eval.h"
#include "cuir/ir/program.h"
#include "cuir/lower/cuda_emit.h"
#include "cuir/lower/expert.h"
#include "gtest/gtest.h"
#include "tests/lower/lower_test_util.h"

namespace cubridge::lower {
namespace {

using testing::CleanUpTempDir;
using testing::CommandResult;
using testing::FindNvcc;
using testing::MakeTempDir;
using testing::RunCommand;
using testing::WriteFile;

constexpr int64_t kIntMin = std::numeric_limits<int32_t>::min();
constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
constexpr int64_t kLongMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kLongMax = std::numeric_limits<int64_t>::max();

// The symbols the expressions read, in the order the compiled functions take them: x, y and nx
// are ints (y a divisor of either sign, nx never negative where the scope knows it), z a long
// long, q_idx / kv_idx / heads_q the element's. BLOCK and BLK3 are constants the scope knows, which
// the emitter writes as their values.
const char* const kSymbols[] = {"x", "z", "y", "nx", "q_idx", "kv_idx", "heads_q"};
constexpr int kSymbolCount = 7;
using Inputs = std::array<int64_t, kSymbolCount>;

EmitScope Scope(bool with_bounds) {
  EmitScope scope(EmitTarget::kHost);
  for (const char* name : {"x", "y", "nx", "q_idx", "kv_idx", "heads_q", "BLOCK", "BLK3"}) {
    scope.Bind(name, name, CType::kInt);
  }
  scope.Bind("z", "z", CType::kLong);
  if (with_bounds) {
    cuir::BoundsEnv env = cuir::ElementBoundsEnv();
    env["nx"] = cuir::SymbolRange{cuir::IntLit(0), nullptr, 0, kIntMax};
    env["BLOCK"] = cuir::SymbolRange{nullptr, nullptr, 64, 64};
    env["BLK3"] = cuir::SymbolRange{nullptr, nullptr, 48, 48};
    scope.SetBounds(std::move(env));
  }
  return scope;
}

// Which operand values a case is evaluated at: all that its scope's ranges allow, as far as an
// int holds them (never INT_MIN // -1, which C cannot represent).
enum class Domain {
  kX,      // x in [-1000, 1000] and the ten ints next to each limit
  kXY,     // x around zero and the limits, y of either sign
  kNX,     // nx in [0, 1000] and next to INT_MAX
  kQK,     // q_idx, kv_idx in [0, 70] and a few large pairs
  kQKH,    // the same with heads_q
  kZ,      // z in [-1000, 1000] and next to the long long limits
  kConst,  // no symbols
};

struct Case {
  std::string cuir;
  bool with_bounds;
  std::string cuda;  // the exact emitted text
  CType type;
  Domain domain;
};

const Case kCases[] = {
    // Powers of two: a shift floors, a mask is the Python remainder, for either sign.
    {"x // 8", false, "(x >> 3)", CType::kInt, Domain::kX},
    {"x % 8", false, "(x & 7)", CType::kInt, Domain::kX},
    {"x // 1", false, "x", CType::kInt, Domain::kX},
    {"x % 1", false, "(x & 0)", CType::kInt, Domain::kX},
    {"x // 4294967296", false, "(static_cast<long long>(x) >> 32)", CType::kLong, Domain::kX},
    {"x % 4294967296", false, "(static_cast<long long>(x) & 4294967295LL)", CType::kLong,
     Domain::kX},
    {"z // 8", false, "(z >> 3)", CType::kLong, Domain::kZ},
    {"z % 1024", false, "(z & 1023)", CType::kLong, Domain::kZ},
    {"-7 // 2", false, "((-7) >> 1)", CType::kInt, Domain::kConst},
    {"(q_idx - kv_idx) % 64", true, "((q_idx - kv_idx) & 63)", CType::kInt, Domain::kQK},
    {"(q_idx - kv_idx) // 64", false, "((q_idx - kv_idx) >> 6)", CType::kInt, Domain::kQK},
    {"kv_idx // BLOCK", true, "(kv_idx >> 6)", CType::kInt, Domain::kQK},
    // A positive divisor and a dividend that is never negative: C's truncation is the floor.
    {"nx // 7", true, "(nx / 7)", CType::kInt, Domain::kNX},
    {"nx % 7", true, "(nx % 7)", CType::kInt, Domain::kNX},
    {"q_idx // 3", true, "(q_idx / 3)", CType::kInt, Domain::kQK},
    {"kv_idx % 3", true, "(kv_idx % 3)", CType::kInt, Domain::kQK},
    {"(q_idx * 3) // 5", true, "((static_cast<long long>(q_idx) * 3) / 5)", CType::kLong,
     Domain::kQK},
    {"q_idx // heads_q", true, "(q_idx / heads_q)", CType::kInt, Domain::kQKH},
    {"(min(abs(q_idx - kv_idx), 31) + select(q_idx < kv_idx, 32, 0)) % 10", true,
     "((cuir_min<int>(abs((q_idx - kv_idx)), 31) + ((q_idx < kv_idx) ? 32 : 0)) % 10)", CType::kInt,
     Domain::kQK},
    {"7 // 3", false, "(7 / 3)", CType::kInt, Domain::kConst},
    // A positive divisor, a dividend of either sign: the positive-divisor helpers.
    {"x // 7", false, "cuir_floordiv_pos<int>(x, 7)", CType::kInt, Domain::kX},
    {"x % 7", false, "cuir_mod_pos<int>(x, 7)", CType::kInt, Domain::kX},
    {"x // 1000", false, "cuir_floordiv_pos<int>(x, 1000)", CType::kInt, Domain::kX},
    {"x % 1000", false, "cuir_mod_pos<int>(x, 1000)", CType::kInt, Domain::kX},
    {"nx // 7", false, "cuir_floordiv_pos<int>(nx, 7)", CType::kInt, Domain::kNX},
    {"q_idx // 3", false, "cuir_floordiv_pos<int>(q_idx, 3)", CType::kInt, Domain::kQK},
    {"(q_idx - kv_idx) // 3", true, "cuir_floordiv_pos<int>((q_idx - kv_idx), 3)", CType::kInt,
     Domain::kQK},
    {"(q_idx - kv_idx) % 3", true, "cuir_mod_pos<int>((q_idx - kv_idx), 3)", CType::kInt,
     Domain::kQK},
    {"(q_idx - kv_idx) % BLK3", true, "cuir_mod_pos<int>((q_idx - kv_idx), 48)", CType::kInt,
     Domain::kQK},
    {"(q_idx - kv_idx) % heads_q", true, "cuir_mod_pos<int>((q_idx - kv_idx), heads_q)",
     CType::kInt, Domain::kQKH},
    {"(q_idx - kv_idx) // heads_q", true, "cuir_floordiv_pos<int>((q_idx - kv_idx), heads_q)",
     CType::kInt, Domain::kQKH},
    {"x // 3000000000", false, "cuir_floordiv_pos<long long>(x, 3000000000LL)", CType::kLong,
     Domain::kX},
    {"z % 1000", false, "cuir_mod_pos<long long>(z, 1000)", CType::kLong, Domain::kZ},
    {"z // 1000", false, "cuir_floordiv_pos<long long>(z, 1000)", CType::kLong, Domain::kZ},
    {"(x // 3) % 8", false, "(cuir_floordiv_pos<int>(x, 3) & 7)", CType::kInt, Domain::kX},
    // A remainder by a literal compared with a residue: the divisibility test, for any sign.
    {"select(x % 7 == 0, 1, 0)", false, "(cuir_divisible<7>(x) ? 1 : 0)", CType::kInt, Domain::kX},
    {"select(x % 12 != 0, 1, 0)", false, "((!cuir_divisible<12>(x)) ? 1 : 0)", CType::kInt,
     Domain::kX},
    {"select(0 == x % 1000, 1, 0)", false, "(cuir_divisible<1000>(x) ? 1 : 0)", CType::kInt,
     Domain::kX},
    {"select((q_idx - kv_idx) % 3 == 1, 1, 0)", true,
     "(cuir_divisible<3>(((q_idx - kv_idx) - 1)) ? 1 : 0)", CType::kInt, Domain::kQK},
    // ... not where x - r could leave int (no ranges), nor for a residue the remainder never
    // takes, nor by a power of two (already a mask).
    {"select(x % 3 == 2, 1, 0)", false, "((cuir_mod_pos<int>(x, 3) == 2) ? 1 : 0)", CType::kInt,
     Domain::kX},
    {"select(x % 7 == 9, 1, 0)", false, "((cuir_mod_pos<int>(x, 7) == 9) ? 1 : 0)", CType::kInt,
     Domain::kX},
    {"select(x % 8 == 0, 1, 0)", false, "(((x & 7) == 0) ? 1 : 0)", CType::kInt, Domain::kX},
    // Anything else: the general helpers.
    {"x // -4", false, "cuir_floordiv<int>(x, (-4))", CType::kInt, Domain::kX},
    {"x % -4", false, "cuir_mod<int>(x, (-4))", CType::kInt, Domain::kX},
    {"x // -7", false, "cuir_floordiv<int>(x, (-7))", CType::kInt, Domain::kX},
    {"x % -7", false, "cuir_mod<int>(x, (-7))", CType::kInt, Domain::kX},
    {"x // y", false, "cuir_floordiv<int>(x, y)", CType::kInt, Domain::kXY},
    {"x % y", false, "cuir_mod<int>(x, y)", CType::kInt, Domain::kXY},
    {"x // y", true, "cuir_floordiv<int>(x, y)", CType::kInt, Domain::kXY},
    {"q_idx // heads_q", false, "cuir_floordiv<int>(q_idx, heads_q)", CType::kInt, Domain::kQKH},
};

std::string Describe(const Case& c) {
  return absl::StrCat(c.cuir, c.with_bounds ? " (element ranges)" : " (no ranges)");
}

TEST(IntArith, EmitsTheCheapestExactForm) {
  for (const Case& c : kCases) {
    auto e = cuir::ParseExpr(c.cuir);
    ASSERT_TRUE(e.ok()) << c.cuir << ": " << e.status();
    auto emitted = EmitExpr(*e, Scope(c.with_bounds));
    ASSERT_TRUE(emitted.ok()) << Describe(c) << ": " << emitted.status();
    EXPECT_EQ(emitted->text, c.cuda) << Describe(c);
    EXPECT_EQ(emitted->type, c.type) << Describe(c) << " gave " << CTypeName(emitted->type);
  }
}

// Float operands keep the float helpers, whatever the divisor.
TEST(IntArith, FloatsKeepTheFloatHelpers) {
  EmitScope scope = Scope(true);
  scope.Bind("f", "f", CType::kFloat);
  auto e = cuir::ParseExpr("f // 8");
  ASSERT_TRUE(e.ok());
  auto emitted = EmitExpr(*e, scope);
  ASSERT_TRUE(emitted.ok()) << emitted.status();
  EXPECT_EQ(emitted->text, "cuir_floordiv_f(f, 8.0f)");
}

std::vector<Inputs> InputsOf(Domain domain) {
  const Inputs defaults = {0, 0, 1, 0, 0, 0, 1};
  std::vector<Inputs> out;
  auto add = [&](std::initializer_list<std::pair<int, int64_t>> values) {
    Inputs in = defaults;
    for (const auto& [slot, v] : values) in[slot] = v;
    out.push_back(in);
  };
  std::vector<int64_t> around_zero, near_limits;
  for (int64_t v = -1000; v <= 1000; ++v) around_zero.push_back(v);
  for (int64_t i = 0; i < 10; ++i) {
    near_limits.push_back(kIntMin + i);
    near_limits.push_back(kIntMax - i);
  }
  const int64_t big_index = kIntMax - 1;  // the largest index a size of INT_MAX allows
  const std::vector<std::pair<int64_t, int64_t>> big_pairs = {
      {0, big_index}, {big_index, 0}, {big_index, big_index}, {12345, 1 << 30}, {1 << 30, 7}};
  switch (domain) {
    case Domain::kX:
      for (int64_t v : around_zero) add({{0, v}});
      for (int64_t v : near_limits) add({{0, v}});
      break;
    case Domain::kXY:
      for (int64_t y : {-1000, -7, -3, -1, 1, 2, 3, 8, 64, static_cast<int>(kIntMax),
                        static_cast<int>(kIntMin)}) {
        for (int64_t x = -60; x <= 60; ++x) add({{0, x}, {2, y}});
        for (int64_t x : near_limits) {
          if (!(x == kIntMin && y == -1)) add({{0, x}, {2, y}});
        }
      }
      break;
    case Domain::kNX:
      for (int64_t v = 0; v <= 1000; ++v) add({{3, v}});
      for (int64_t i = 0; i < 10; ++i) add({{3, kIntMax - i}});
      break;
    case Domain::kQK:
      for (int64_t q = 0; q <= 70; ++q) {
        for (int64_t kv = 0; kv <= 70; ++kv) add({{4, q}, {5, kv}});
      }
      for (const auto& [q, kv] : big_pairs) add({{4, q}, {5, kv}});
      break;
    case Domain::kQKH:
      for (int64_t h : {1, 3, 7, 64}) {
        for (int64_t q = 0; q <= 40; ++q) {
          for (int64_t kv = 0; kv <= 40; ++kv) add({{4, q}, {5, kv}, {6, h}});
        }
        for (const auto& [q, kv] : big_pairs) add({{4, q}, {5, kv}, {6, h}});
      }
      break;
    case Domain::kZ:
      for (int64_t v : around_zero) add({{1, v}});
      for (int64_t i = 0; i < 10; ++i) {
        add({{1, kLongMin + i}});
        add({{1, kLongMax - i}});
      }
      break;
    case Domain::kConst:
      out.push_back(defaults);
      break;
  }
  return out;
}

TEST(IntArith, EveryFormComputesPythonSemantics) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  // One function per case, host and device; main applies case c to each input line.
  std::string program = absl::StrCat("#include <stdio.h>\n#include \"", ExpertsDir(),
                                     "/common/cuir_scalar.cuh\"\n");
  const std::string params =
      "int x, long long z, int y, int nx, int q_idx, int kv_idx, int heads_q";
  std::string table, input;
  std::vector<int64_t> expected;
  std::vector<std::string> labels;
  for (size_t i = 0; i < std::size(kCases); ++i) {
    const Case& c = kCases[i];
    auto e = cuir::ParseExpr(c.cuir);
    ASSERT_TRUE(e.ok()) << c.cuir << ": " << e.status();
    auto emitted = EmitExpr(*e, Scope(c.with_bounds));
    ASSERT_TRUE(emitted.ok()) << Describe(c) << ": " << emitted.status();
    absl::StrAppend(&program, "__host__ __device__ long long f", i, "(", params,
                    ") {\n  (void)x, (void)z, (void)y, (void)nx, (void)q_idx, (void)kv_idx, "
                    "(void)heads_q;\n  return static_cast<long long>(",
                    emitted->text, ");\n}\n");
    absl::StrAppend(&table, i == 0 ? "" : ", ", "f", i);
    for (const Inputs& in : InputsOf(c.domain)) {
      cuir::ScalarEnv env;
      for (int s = 0; s < kSymbolCount; ++s) env.vars[kSymbols[s]] = in[s];
      env.vars["BLOCK"] = int64_t{64};
      env.vars["BLK3"] = int64_t{48};
      auto want = cuir::EvalInt(*e, env);
      ASSERT_TRUE(want.ok()) << Describe(c) << ": " << want.status();
      expected.push_back(*want);
      labels.push_back(absl::StrCat(Describe(c), " as `", emitted->text, "` at ",
                                    absl::StrJoin(in, ", ")));
      absl::StrAppend(&input, i, " ", absl::StrJoin(in, " "), "\n");
    }
  }
  absl::StrAppend(&program, "typedef long long (*Fn)(", params, ");\n",
                  "static const Fn kFns[] = {", table, "};\n", R"(
// The device compiles every form too (it is not run here).
__global__ void on_device(long long* out, int c, int x, long long z, int y, int nx, int q_idx,
                          int kv_idx, int heads_q) {
)");
  for (size_t i = 0; i < std::size(kCases); ++i) {
    absl::StrAppend(&program, "  if (c == ", i, ") *out = f", i,
                    "(x, z, y, nx, q_idx, kv_idx, heads_q);\n");
  }
  program += R"(}
int main() {
  int c, x, y, nx, q, kv, h;
  long long z;
  while (scanf("%d %d %lld %d %d %d %d %d", &c, &x, &z, &y, &nx, &q, &kv, &h) == 8) {
    printf("%lld\n", kFns[c](x, z, y, nx, q, kv, h));
  }
  return 0;
}
)";
  const std::string dir = MakeTempDir("cubridge_int_arith_");
  ASSERT_FALSE(dir.empty());
  WriteFile(dir + "/int_arith.cu", program);
  WriteFile(dir + "/inputs.txt", input);
  // -O2 so that the host compiler's optimizer sees the forms as they are meant to be used.
  const CommandResult build = RunCommand(absl::StrCat(nvcc, " -std=c++17 -O2 -arch=sm_80 -o ", dir,
                                                      "/int_arith ", dir, "/int_arith.cu"));
  ASSERT_EQ(build.exit_code, 0) << build.output;
  const CommandResult run = RunCommand(absl::StrCat(dir, "/int_arith < ", dir, "/inputs.txt"));
  ASSERT_EQ(run.exit_code, 0) << run.output.substr(0, 2000);
  const std::vector<std::string> lines = absl::StrSplit(run.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), expected.size());
  int wrong = 0;
  for (size_t i = 0; i < lines.size() && wrong < 20; ++i) {
    if (lines[i] != absl::StrCat(expected[i])) {
      ++wrong;
      ADD_FAILURE() << labels[i] << ": got " << lines[i] << ", Python gives " << expected[i];
    }
  }
  CleanUpTempDir(dir, HasFailure());
}

// Compiles `program` (which prints "checked N wrong M" and exits non-zero where M > 0) with nvcc
// as host code, runs it, and expects it to find nothing wrong.
void ExpectNoneWrong(const std::string& nvcc, const std::string& name, const std::string& program) {
  const std::string dir = MakeTempDir("cubridge_" + name + "_");
  ASSERT_FALSE(dir.empty());
  WriteFile(dir + "/" + name + ".cu", program);
  const CommandResult build = RunCommand(absl::StrCat(nvcc, " -std=c++17 -O2 -arch=sm_80 -o ", dir,
                                                      "/", name, " ", dir, "/", name, ".cu"));
  ASSERT_EQ(build.exit_code, 0) << build.output;
  const CommandResult run = RunCommand(dir + "/" + name);
  EXPECT_EQ(run.exit_code, 0) << run.output.substr(0, 2000);
  EXPECT_NE(run.output.find(" wrong 0"), std::string::npos) << run.output.substr(0, 2000);
  CleanUpTempDir(dir, ::testing::Test::HasFailure());
}

// A positive int the lowering hoisted out of the element loop (a per-head dilation) with its
// multiplier bound beside it: `//` and `%` by it multiply, and the unsigned form serves a
// dividend that is never negative.
TEST(IntArith, AHoistedDivisorMultiplies) {
  EmitScope scope = Scope(true);
  cuir::BoundsEnv env = *scope.bounds();
  env["dv"] = cuir::SymbolRange{cuir::IntLit(1), cuir::IntLit(4), 1, 4};
  scope.SetBounds(env);
  scope.Bind("dv", "invariant", CType::kInt);
  scope.Bind(DivisorKey("dv"), DivisorName("invariant"), CType::kInt);
  const std::pair<const char*, const char*> cases[] = {
      {"(q_idx - kv_idx) % dv", "cuir_mod_by((q_idx - kv_idx), invariant_divisor)"},
      {"(q_idx - kv_idx) // dv", "cuir_floordiv_by((q_idx - kv_idx), invariant_divisor)"},
      {"kv_idx // dv", "cuir_udiv_by(kv_idx, invariant_divisor)"},
      {"kv_idx % dv", "cuir_mod_by(kv_idx, invariant_divisor)"},
      // 64-bit dividends keep the helpers: the multiplier is exact for 31-bit ones only.
      {"z % dv", "cuir_mod_pos<long long>(z, invariant)"},
  };
  for (const auto& [cuir_text, cuda] : cases) {
    auto e = cuir::ParseExpr(cuir_text);
    ASSERT_TRUE(e.ok()) << cuir_text;
    auto emitted = EmitExpr(*e, scope);
    ASSERT_TRUE(emitted.ok()) << cuir_text << ": " << emitted.status();
    EXPECT_EQ(emitted->text, cuda) << cuir_text;
  }
}

// cuir_floordiv_by / cuir_mod_by / cuir_udiv_by against Python's floor division and modulo
// (computed in 64 bits beside them), for divisors across [1, 2^31 - 1] (powers of two and their
// neighbours, small primes, the largest) and dividends around zero, at the int limits and
// spread over the whole range, compiled by nvcc as host code.
TEST(IntArith, HoistedDivisorsAreExactOverTheIntRange) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string program = absl::StrCat("#include <stdio.h>\n#include \"", ExpertsDir(),
                                           "/common/cuir_scalar.cuh\"\n", R"(
static long long py_floordiv(long long n, long long d) {
  long long q = n / d;
  return (q * d != n && ((n < 0) != (d < 0))) ? q - 1 : q;
}
int main() {
  const int divisors[] = {1, 2, 3, 4, 5, 7, 8, 9, 48, 641, 65535, 65536, 65537, 1 << 20,
                          (1 << 20) + 1, 1000000007, (1 << 30) - 1, 1 << 30, (1 << 30) + 1,
                          2147483646, 2147483647};
  long long wrong = 0, checked = 0;
  for (int d : divisors) {
    const cuir_divisor v = cuir_divisor_of(d);
    auto check = [&](int n) {
      const long long q = py_floordiv(n, d), r = (long long)n - q * d;
      ++checked;
      bool ok = cuir_floordiv_by(n, v) == q && cuir_mod_by(n, v) == r;
      if (n >= 0) ok = ok && cuir_udiv_by(n, v) == q;
      if (!ok && wrong++ < 10) printf("d=%d n=%d\n", d, n);
    };
    for (int n = -5000; n <= 5000; ++n) check(n);
    for (int i = 0; i < 64; ++i) {
      check(2147483647 - i);
      check(-2147483647 - 1 + i);
    }
    unsigned x = 12345u;
    for (int i = 0; i < 200000; ++i) {
      x = x * 1664525u + 1013904223u;
      check((int)x);
      check((int)(d * (long long)((int)x / d) % 2147483647));  // multiples of d and next to them
      check((int)x / d * d - 1);
    }
  }
  printf("checked %lld wrong %lld\n", checked, wrong);
  return wrong != 0;
}
)");
  ExpectNoneWrong(nvcc, "divisor", program);
}

// cuir_divisible<C>(n) against n % C == 0 for odd, even and prime C up to INT_MAX and dividends
// around zero, at the int limits, multiples of C and their neighbours, compiled by nvcc as host
// code (the device form is the same expression; EveryFormComputesPythonSemantics compiles it).
TEST(IntArith, DivisibilityTestsAreExactOverTheIntRange) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc (CUBRIDGE_NVCC unset, /usr/local/cuda/bin/nvcc absent)";
  const std::string program = absl::StrCat("#include <stdio.h>\n#include \"", ExpertsDir(),
                                           "/common/cuir_scalar.cuh\"\n", R"(
long long wrong = 0, checked = 0;
template <int C>
void check_all() {
  auto check = [](int n) {
    ++checked;
    if (cuir_divisible<C>(n) != (n % C == 0) && wrong++ < 10) printf("C=%d n=%d\n", C, n);
  };
  for (int n = -5000; n <= 5000; ++n) check(n);
  for (int i = 0; i < 64; ++i) {
    check(2147483647 - i);
    check(-2147483647 - 1 + i);
  }
  unsigned x = 12345u;
  for (int i = 0; i < 100000; ++i) {
    x = x * 1664525u + 1013904223u;
    const int m = (int)x / C * C;  // a multiple of C, and its neighbours
    check((int)x);
    check(m);
    check(m == -2147483647 - 1 ? m : m - 1);
    check(m == 2147483647 ? m : m + 1);
  }
}
int main() {
  check_all<3>(); check_all<5>(); check_all<6>(); check_all<7>(); check_all<9>();
  check_all<12>(); check_all<48>(); check_all<641>(); check_all<1000>(); check_all<65535>();
  check_all<65537>(); check_all<1000000007>(); check_all<(1 << 30) - 1>();
  check_all<(1 << 30) + 1>(); check_all<3 << 29>(); check_all<2147483646>();
  check_all<2147483647>();
  printf("checked %lld wrong %lld\n", checked, wrong);
  return wrong != 0;
}
)");
  ExpectNoneWrong(nvcc, "divisible", program);
}

}  // namespace
}  // namespace cubridge::lower
