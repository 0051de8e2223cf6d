// q8 codec (custom_ops/q8.py): 8-bit affine quantisation per group, the tensor viewed as [A, G, B] and element
// i in group g = (i / B) % G. The per-group lo, inv = 1/scale and scale come from the host-side array code
// (the same for NumPy and CuPy); these kernels do the per-element arithmetic exactly as NumPy writes it:
//   encode: t = (x - lo) * inv (two float32 roundings, no FMA), code = min(max(rint(t), 0), 255)
//           (fmaxf turns NaN into 0, as numpy.fmax does; rintf rounds half to even, as numpy.rint);
//   decode: y = lo + code * scale (two roundings, no FMA: __fmul_rn/__fadd_rn are never contracted).
// One thread per element, grid-stride loops.

extern "C" __global__ void q8_encode(const float* __restrict__ x, const float* __restrict__ lo,
                                     const float* __restrict__ inv, unsigned char* __restrict__ codes,
                                     long long n, long long groups, long long inner) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long g = (i / inner) % groups;
        const float t = __fmul_rn(__fsub_rn(x[i], lo[g]), inv[g]);
        codes[i] = (unsigned char)(int)fminf(fmaxf(rintf(t), 0.0f), 255.0f);
    }
}

extern "C" __global__ void q8_decode(const unsigned char* __restrict__ codes, const float* __restrict__ lo,
                                     const float* __restrict__ scale, float* __restrict__ y,
                                     long long n, long long groups, long long inner) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long g = (i / inner) % groups;
        y[i] = __fadd_rn(lo[g], __fmul_rn((float)codes[i], scale[g]));
    }
}
