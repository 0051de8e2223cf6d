// relumask codec: the signbits bitstream (bit i = x[i] > 0, numpy.packbits little bit order), decoded to a
// one-byte boolean mask instead of 1.0f/0.0f — a quarter of the bytes for Where(mask, dY, 0), which is what
// ReluGrad computes. Encoding is signbits_encode in signbits.cu.

extern "C" __global__ void relumask_decode(const unsigned char* __restrict__ bits, unsigned char* __restrict__ mask,
                                           long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        mask[i] = (unsigned char)((bits[i >> 3] >> (i & 7)) & 1u);
    }
}
