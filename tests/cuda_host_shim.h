// Host shim: compile a CUDA kernel file as plain C++ (one "thread" walks every block) to check its bits.
#include <cmath>
#include <cstring>
#include <algorithm>
using std::max; using std::min;
#define __global__
#define __device__
#define __forceinline__ inline
#define __constant__ static
#define __restrict__
struct Dim { long long x; };
static Dim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
static inline unsigned int atomicOr(unsigned int* p, unsigned int v) { unsigned int o = *p; *p |= v; return o; }
static inline int atomicOr(int* p, int v) { int o = *p; *p |= v; return o; }
static inline int __clz(unsigned int v) { return v ? __builtin_clz(v) : 32; }
static inline int __clzll(long long v) { return v ? __builtin_clzll((unsigned long long)v) : 64; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __double2float_rn(double d) { return (float)d; }
