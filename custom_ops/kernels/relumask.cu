// relumask codec: the signbits bitstream (bit i = x[i] > 0, numpy.packbits little bit order), decoded to a
// one-byte boolean mask instead of 1.0f/0.0f -- a quarter of the bytes for Where(mask, dY, 0), which is what
// ReluGrad computes. Encoding is signbits_encode in signbits.cu.
// A warp takes 32 input bytes (256 mask bytes) per step; store k (0, 1) of lane L writes mask bytes
// [128k + 4L, +4) -- nibble (L & 1) of byte 16k + L/2 -- as one 4-byte word: 128 contiguous bytes per store.

extern "C" __global__ void relumask_decode(const unsigned char* __restrict__ bits, unsigned char* __restrict__ mask,
                                           long long n) {
    const long long nbytes = (n + 7) >> 3;
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    const bool vec = ((unsigned long long)mask & 3ull) == 0;
    for (long long b0 = warp * 32; b0 < nbytes; b0 += nwarps * 32) {  // uniform across the warp
        const long long e0 = b0 * 8;
        if (vec && e0 + 256 <= n) {
#pragma unroll
            for (int k = 0; k < 2; ++k) {
                const unsigned int nib = (bits[b0 + 16 * k + (lane >> 1)] >> ((lane & 1) * 4)) & 15u;
                // bit j of the nibble -> byte j: the four shifted copies land on distinct bits (no carries)
                reinterpret_cast<unsigned int*>(mask + e0 + 128 * k)[lane] = (nib * 0x00204081u) & 0x01010101u;
            }
        } else {
            for (long long i = e0 + lane; i < e0 + 256 && i < n; i += 32)
                mask[i] = (unsigned char)((bits[i >> 3] >> (i & 7)) & 1u);
        }
    }
}
