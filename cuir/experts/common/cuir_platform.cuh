// The C library pieces the expert kernels use. nvcc builds (the shipped kernel.cu with its host
// launcher) take them from the C headers; NVRTC (worker/gpu compiles candidates at run time, where
// no C library headers exist) takes the types and limits from CCCL's cuda/std headers and has
// the math functions built in.
#pragma once

#ifdef __CUDACC_RTC__
#include <cuda/std/climits>
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#else
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#endif
