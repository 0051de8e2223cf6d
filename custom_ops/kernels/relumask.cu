// relumask codec: the signbits bitstream (bit i = x[i] > 0, numpy.packbits little bit order), decoded to a
// one-byte boolean mask instead of 1.0f/0.0f -- a quarter of the bytes for Where(mask, dY, 0), which is what
// ReluGrad computes. Encoding is signbits_encode in signbits.cu.
// One thread per input byte: its 8 mask bytes go out as one 8-byte store when the output is aligned.

extern "C" __global__ void relumask_decode(const unsigned char* __restrict__ bits, unsigned char* __restrict__ mask,
                                           long long n) {
    const long long nbytes = (n + 7) >> 3;
    const bool vec = ((unsigned long long)mask & 7ull) == 0;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nbytes; b += stride) {
        const unsigned long long byte = bits[b];
        const long long i0 = b * 8;
        if (vec && i0 + 8 <= n) {
            // bit j of the byte -> byte j (0 or 1): copy the byte into all 8 lanes, keep bit j in lane j,
            // then turn each nonzero lane into 1 (+0x7f carries into bit 7 only when the lane is nonzero)
            const unsigned long long lanes = (byte * 0x0101010101010101ull) & 0x8040201008040201ull;
            const unsigned long long spread = ((lanes + 0x7f7f7f7f7f7f7f7full) >> 7) & 0x0101010101010101ull;
            reinterpret_cast<unsigned long long*>(mask + i0)[0] = spread;
        } else {
            for (int j = 0; j < 8 && i0 + j < n; ++j) mask[i0 + j] = (unsigned char)((byte >> j) & 1u);
        }
    }
}
