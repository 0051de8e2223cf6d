// DPR codecs (custom_ops/dpr.py): float32 <-> fp16 (1-5-10), bf16 (1-8-7), fp10 (1-5-4), fp8 (1-4-3).
// Byte-for-byte the NumPy backend's arithmetic (see dpr.py's docstring for the semantics):
//   round to nearest even; finite overflow saturates at the max finite code; gradual underflow (subnormals),
//   tiny values -> signed zero; +-Inf -> +-Inf; NaN -> canonical quiet NaN with its sign.
// Decoding is exact (every format value is a float32); NaN codes widen their mantissa bits (like numpy f16).
// Payload layouts: fp16/bf16 one uint16 per element, fp8 one uint8, fp10 three 10-bit codes per uint32
// (element i in bits 10*(i%3).. of word i/3, bits 30-31 and a partial last word's unused fields 0).
// Encoders run one thread per output word, so every word is written whole by exactly one thread.
// Float ops are __fadd_rn / __fmul_rn: never contracted into FMAs, exact or correctly rounded like NumPy's.

template <int E, int M>
__device__ __forceinline__ unsigned int dpr_encode_code(float x) {
    constexpr int BIAS = (1 << (E - 1)) - 1;
    constexpr int SHIFT = 23 - M;
    constexpr unsigned int INF_CODE = ((1u << E) - 1u) << M;
    constexpr unsigned int MAX_CODE = INF_CODE - 1u;
    constexpr unsigned int NAN_CODE = INF_CODE | (1u << (M - 1));
    constexpr unsigned int SIGN_BIT = 1u << (E + M);
    constexpr unsigned int MIN_NORMAL_F32 = (unsigned int)(127 + 1 - BIAS) << 23;
    // Half an output ulp minus one, minus the exponent rebias, added mod 2^32 before the shift.
    constexpr unsigned int ROUND_ADD = ((1u << (SHIFT - 1)) - 1u) - ((unsigned int)(127 - BIAS) << 23);
    // float32 bits of 2^(24-BIAS-M): in [C, 2C) a float32 ulp is the format's subnormal step.
    constexpr unsigned int MAGIC_BITS = (unsigned int)(127 + 24 - BIAS - M) << 23;

    const unsigned int u = __float_as_uint(x);
    const unsigned int a = u & 0x7fffffffu;
    const unsigned int sign = (u >> (31 - E - M)) & SIGN_BIT;
    unsigned int t;
    if (a >= 0x7f800000u) {
        t = (a == 0x7f800000u) ? INF_CODE : NAN_CODE;
    } else if (BIAS == 127 || a >= MIN_NORMAL_F32) {  // bf16 shares float32's range: this path is exact for it
        t = (a + ((a >> SHIFT) & 1u) + ROUND_ADD) >> SHIFT;
        t = min(t, MAX_CODE);
    } else {
        const float magic = __uint_as_float(MAGIC_BITS);
        t = __float_as_uint(__fadd_rn(__uint_as_float(a), magic)) - MAGIC_BITS;
    }
    return sign | t;
}

template <int E, int M>
__device__ __forceinline__ float dpr_decode_code(unsigned int c) {
    constexpr int BIAS = (1 << (E - 1)) - 1;
    constexpr unsigned int EMAX = (1u << E) - 1u;
    const unsigned int sign = (c >> (E + M)) << 31;
    const unsigned int e = (c >> M) & EMAX;
    const unsigned int m = c & ((1u << M) - 1u);
    const unsigned int mant = m << (23 - M);
    unsigned int bits;
    if (e == EMAX) {
        bits = 0x7f800000u | mant;
    } else if (e == 0) {  // m * 2^(1-BIAS-M): an exact product
        bits = __float_as_uint(__fmul_rn((float)m, __uint_as_float((unsigned int)(127 + 1 - BIAS - M) << 23)));
    } else {
        bits = ((e + (unsigned int)(127 - BIAS)) << 23) | mant;
    }
    return __uint_as_float(sign | bits);
}

// -- one code per payload element (fp16, bf16: unsigned short; fp8: unsigned char) ------------------------
template <int E, int M, typename T>
__device__ __forceinline__ void dpr_encode_1(const float* __restrict__ x, T* __restrict__ out, long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = (T)dpr_encode_code<E, M>(x[i]);
    }
}

template <int E, int M, typename T>
__device__ __forceinline__ void dpr_decode_1(const T* __restrict__ in, float* __restrict__ y, long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = dpr_decode_code<E, M>((unsigned int)in[i]);
    }
}

extern "C" __global__ void dpr_fp16_encode(const float* __restrict__ x, unsigned short* __restrict__ out,
                                           long long n, long long nwords) {
    dpr_encode_1<5, 10>(x, out, n);
}

extern "C" __global__ void dpr_fp16_decode(const unsigned short* __restrict__ in, float* __restrict__ y,
                                           long long n) {
    dpr_decode_1<5, 10>(in, y, n);
}

extern "C" __global__ void dpr_bf16_encode(const float* __restrict__ x, unsigned short* __restrict__ out,
                                           long long n, long long nwords) {
    dpr_encode_1<8, 7>(x, out, n);
}

extern "C" __global__ void dpr_bf16_decode(const unsigned short* __restrict__ in, float* __restrict__ y,
                                           long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = __uint_as_float((unsigned int)in[i] << 16);  // what dpr_decode_code<8, 7> computes
    }
}

extern "C" __global__ void dpr_fp8_encode(const float* __restrict__ x, unsigned char* __restrict__ out,
                                          long long n, long long nwords) {
    dpr_encode_1<4, 3>(x, out, n);
}

extern "C" __global__ void dpr_fp8_decode(const unsigned char* __restrict__ in, float* __restrict__ y,
                                          long long n) {
    dpr_decode_1<4, 3>(in, y, n);
}

// -- fp10: three codes per 32-bit word ------------------------------------------------------------------
extern "C" __global__ void dpr_fp10_encode(const float* __restrict__ x, unsigned int* __restrict__ words,
                                           long long n, long long nwords) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x; w < nwords; w += stride) {
        const long long i0 = 3 * w;
        unsigned int word = 0;
#pragma unroll
        for (int j = 0; j < 3; ++j) {
            if (i0 + j < n) word |= dpr_encode_code<5, 4>(x[i0 + j]) << (10 * j);
        }
        words[w] = word;
    }
}

extern "C" __global__ void dpr_fp10_decode(const unsigned int* __restrict__ words, float* __restrict__ y,
                                           long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long w = i / 3;
        const int j = (int)(i - 3 * w);
        y[i] = dpr_decode_code<5, 4>((words[w] >> (10 * j)) & 0x3ffu);
    }
}
