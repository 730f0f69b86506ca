// The fuzz build compiles the LibTorch layer as C++17 (cuir/CMakeLists.txt says why); this gives
// it the two constants of C++20's <numbers> that layer uses. Force-included there, nowhere else.
#pragma once

#if __cplusplus < 202002L
namespace std::numbers {
inline constexpr double pi = 3.141592653589793238462643383279502884;
inline constexpr double e = 2.718281828459045235360287471352662498;
}  // namespace std::numbers
#endif
