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
// A thread takes 4 consecutive elements: one 16-byte load of x and one 8- (fp16/bf16) or 4-byte (fp8) store
// of codes, when both pointers are aligned (decided once per launch; CuPy allocations always are).
template <typename T> struct Code4;
template <> struct Code4<unsigned short> { typedef ushort4 V; };
template <> struct Code4<unsigned char> { typedef uchar4 V; };

template <int E, int M, typename T>
__device__ __forceinline__ void dpr_encode_4(const float* __restrict__ x, T* __restrict__ out, long long n) {
    typedef typename Code4<T>::V V;
    const bool vec = (((unsigned long long)x & 15ull) | ((unsigned long long)out & (sizeof(V) - 1))) == 0;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; 4 * g < n; g += stride) {
        const long long i = 4 * g;
        if (vec && i + 4 <= n) {
            const float4 v = reinterpret_cast<const float4*>(x)[g];
            V c;
            c.x = (T)dpr_encode_code<E, M>(v.x);
            c.y = (T)dpr_encode_code<E, M>(v.y);
            c.z = (T)dpr_encode_code<E, M>(v.z);
            c.w = (T)dpr_encode_code<E, M>(v.w);
            reinterpret_cast<V*>(out)[g] = c;
        } else {
            for (long long k = i; k < i + 4 && k < n; ++k) out[k] = (T)dpr_encode_code<E, M>(x[k]);
        }
    }
}

template <int E, int M, typename T>
__device__ __forceinline__ void dpr_decode_4(const T* __restrict__ in, float* __restrict__ y, long long n) {
    typedef typename Code4<T>::V V;
    const bool vec = (((unsigned long long)y & 15ull) | ((unsigned long long)in & (sizeof(V) - 1))) == 0;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; 4 * g < n; g += stride) {
        const long long i = 4 * g;
        if (vec && i + 4 <= n) {
            const V c = reinterpret_cast<const V*>(in)[g];
            float4 v;
            v.x = dpr_decode_code<E, M>((unsigned int)c.x);
            v.y = dpr_decode_code<E, M>((unsigned int)c.y);
            v.z = dpr_decode_code<E, M>((unsigned int)c.z);
            v.w = dpr_decode_code<E, M>((unsigned int)c.w);
            reinterpret_cast<float4*>(y)[g] = v;
        } else {
            for (long long k = i; k < i + 4 && k < n; ++k) y[k] = dpr_decode_code<E, M>((unsigned int)in[k]);
        }
    }
}

extern "C" __global__ void dpr_fp16_encode(const float* __restrict__ x, unsigned short* __restrict__ out,
                                           long long n, long long nwords) {
    dpr_encode_4<5, 10>(x, out, n);
}

extern "C" __global__ void dpr_fp16_decode(const unsigned short* __restrict__ in, float* __restrict__ y,
                                           long long n) {
    dpr_decode_4<5, 10>(in, y, n);
}

extern "C" __global__ void dpr_bf16_encode(const float* __restrict__ x, unsigned short* __restrict__ out,
                                           long long n, long long nwords) {
    dpr_encode_4<8, 7>(x, out, n);
}

// bf16 decode is a shift (what dpr_decode_code<8, 7> computes): dpr_decode_code<8, 7> is exact too, but the
// shift keeps the kernel trivially memory-bound.
template <> __device__ __forceinline__ float dpr_decode_code<8, 7>(unsigned int c) {
    return __uint_as_float(c << 16);
}

extern "C" __global__ void dpr_bf16_decode(const unsigned short* __restrict__ in, float* __restrict__ y,
                                           long long n) {
    dpr_decode_4<8, 7>(in, y, n);
}

extern "C" __global__ void dpr_fp8_encode(const float* __restrict__ x, unsigned char* __restrict__ out,
                                          long long n, long long nwords) {
    dpr_encode_4<4, 3>(x, out, n);
}

extern "C" __global__ void dpr_fp8_decode(const unsigned char* __restrict__ in, float* __restrict__ y,
                                          long long n) {
    dpr_decode_4<4, 3>(in, y, n);
}

// -- fp10: three codes per 32-bit word; a thread per word both ways ---------------------------------------
extern "C" __global__ void dpr_fp10_encode(const float* __restrict__ x, unsigned int* __restrict__ words,
                                           long long n, long long nwords) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x; w < nwords; w += stride) {
        const long long i0 = 3 * w;
        float v[3];
#pragma unroll
        for (int j = 0; j < 3; ++j) v[j] = i0 + j < n ? x[i0 + j] : 0.0f;
        unsigned int word = 0;
#pragma unroll
        for (int j = 0; j < 3; ++j) {
            if (i0 + j < n) word |= dpr_encode_code<5, 4>(v[j]) << (10 * j);
        }
        words[w] = word;
    }
}

// Decode: 4 outputs per thread (one 16-byte store), from the one or two words holding them; i / 3 by a
// multiply-high (the 64-bit division of a thread-per-element version made it 0.34 of copy bandwidth).
extern "C" __global__ void dpr_fp10_decode(const unsigned int* __restrict__ words, float* __restrict__ y,
                                           long long n) {
    const long long nwords = (n + 2) / 3;
    const bool vec = ((unsigned long long)y & 15ull) == 0;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; 4 * g < n; g += stride) {
        const long long i0 = 4 * g;
        const long long w0 = (long long)(__umul64hi((unsigned long long)i0, 0xAAAAAAAAAAAAAAABull) >> 1);  // i0 / 3
        const int j0 = (int)(i0 - 3 * w0);
        const unsigned int a = words[w0];
        const unsigned int b = w0 + 1 < nwords ? words[w0 + 1] : 0u;
        float v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int j = j0 + k;  // 0..5: fields of a, then of b
            v[k] = dpr_decode_code<5, 4>(((j < 3 ? a : b) >> (10 * (j < 3 ? j : j - 3))) & 0x3ffu);
        }
        if (vec && i0 + 4 <= n) {
            reinterpret_cast<float4*>(y)[g] = make_float4(v[0], v[1], v[2], v[3]);
        } else {
            for (int k = 0; k < 4 && i0 + k < n; ++k) y[i0 + k] = v[k];
        }
    }
}
