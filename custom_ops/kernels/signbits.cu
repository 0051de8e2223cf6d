// signbits codec: one bit per float32 element, bit = (x > 0) (NaN, -0.0, +0.0 -> 0; +Inf and positive
// subnormals -> 1). Layout (same as numpy.packbits(x > 0, bitorder="little")): element i is bit (i % 8) of
// byte i / 8; the unused high bits of the last byte are 0.
// "x > 0" is tested on the bit pattern (1 <= bits <= 0x7f800000), so no flush-to-zero mode can turn a
// positive subnormal into 0.
// Encode runs one thread per output byte, so every byte is written whole by exactly one thread (no atomics).
// Decode runs one thread per input byte and writes its 8 outputs with two 16-byte stores when it can.

__device__ __forceinline__ unsigned int sb_positive(float v) {
    return (__float_as_uint(v) - 1u) < 0x7f800000u ? 1u : 0u;
}

extern "C" __global__ void signbits_encode(const float* __restrict__ x, unsigned char* __restrict__ bits,
                                           long long n, long long nbytes) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nbytes; b += stride) {
        const long long i0 = b * 8;
        unsigned int byte = 0;
        if (i0 + 8 <= n) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = x[i0 + j];  // all loads first: 8 in flight per thread
#pragma unroll
            for (int j = 0; j < 8; ++j) byte |= sb_positive(v[j]) << j;
        } else {
            for (int j = 0; i0 + j < n; ++j) byte |= sb_positive(x[i0 + j]) << j;
        }
        bits[b] = (unsigned char)byte;
    }
}

extern "C" __global__ void signbits_decode(const unsigned char* __restrict__ bits, float* __restrict__ y,
                                           long long n) {
    const long long nbytes = (n + 7) >> 3;
    const bool vec = ((unsigned long long)y & 15ull) == 0;  // 16-byte stores need an aligned output
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nbytes; b += stride) {
        const unsigned int byte = bits[b];
        const long long i0 = b * 8;
        if (vec && i0 + 8 <= n) {
            float4 lo, hi;
            lo.x = (float)(byte & 1u);        lo.y = (float)((byte >> 1) & 1u);
            lo.z = (float)((byte >> 2) & 1u); lo.w = (float)((byte >> 3) & 1u);
            hi.x = (float)((byte >> 4) & 1u); hi.y = (float)((byte >> 5) & 1u);
            hi.z = (float)((byte >> 6) & 1u); hi.w = (float)((byte >> 7) & 1u);
            reinterpret_cast<float4*>(y + i0)[0] = lo;
            reinterpret_cast<float4*>(y + i0)[1] = hi;
        } else {
            for (int j = 0; j < 8 && i0 + j < n; ++j) y[i0 + j] = (float)((byte >> j) & 1u);
        }
    }
}
