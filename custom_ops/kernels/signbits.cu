// signbits codec: one bit per float32 element, bit = (x > 0) (NaN, -0.0, +0.0 -> 0; +Inf -> 1).
// Layout (same as numpy.packbits(x > 0, bitorder="little")): element i is bit (i % 8) of byte i / 8;
// the unused high bits of the last byte are 0.
// Encode runs one thread per output byte, so every byte is written whole by exactly one thread (no atomics).

extern "C" __global__ void signbits_encode(const float* __restrict__ x, unsigned char* __restrict__ bits,
                                           long long n, long long nbytes) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nbytes; b += stride) {
        const long long i0 = b * 8;
        unsigned int byte = 0;
        if (i0 + 8 <= n) {
#pragma unroll
            for (int j = 0; j < 8; ++j) byte |= (x[i0 + j] > 0.0f ? 1u : 0u) << j;
        } else {
            for (int j = 0; i0 + j < n; ++j) byte |= (x[i0 + j] > 0.0f ? 1u : 0u) << j;
        }
        bits[b] = (unsigned char)byte;
    }
}

extern "C" __global__ void signbits_decode(const unsigned char* __restrict__ bits, float* __restrict__ y,
                                           long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        y[i] = ((bits[i >> 3] >> (i & 7)) & 1u) ? 1.0f : 0.0f;
    }
}
