// intervalmask codec: one bit per float32 element, bit = (lo <= x && x <= hi) under IEEE rules (NaN -> 0,
// -0.0 == +0.0). Same layout as signbits (numpy.packbits(mask, bitorder="little")): element i is bit (i % 8)
// of byte i / 8; unused high bits of the last byte are 0. Decoding to booleans is relumask_decode.
// The comparisons run on bit patterns mapped to an unsigned total order, so no flush-to-zero mode can turn a
// subnormal into a zero and change a bit (the NumPy and numba encoders compare subnormals as they are).

__device__ __forceinline__ unsigned int im_key(unsigned int u) {
    if (u == 0x80000000u) u = 0u;                       // -0.0 compares equal to +0.0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // monotonic in the float's value
}

__device__ __forceinline__ unsigned int im_inside(float v, unsigned int klo, unsigned int khi) {
    const unsigned int u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;     // NaN: every comparison is false
    const unsigned int k = im_key(u);
    return (k >= klo && k <= khi) ? 1u : 0u;
}

extern "C" __global__ void intervalmask_encode(const float* __restrict__ x, unsigned char* __restrict__ bits,
                                               long long n, long long nbytes, float lo, float hi) {
    const unsigned int klo = im_key(__float_as_uint(lo));
    const unsigned int khi = im_key(__float_as_uint(hi));
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nbytes; b += stride) {
        const long long i0 = b * 8;
        unsigned int byte = 0;
        if (i0 + 8 <= n) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = x[i0 + j];  // all loads first: 8 in flight per thread
#pragma unroll
            for (int j = 0; j < 8; ++j) byte |= im_inside(v[j], klo, khi) << j;
        } else {
            for (int j = 0; i0 + j < n; ++j) byte |= im_inside(x[i0 + j], klo, khi) << j;
        }
        bits[b] = (unsigned char)byte;
    }
}
