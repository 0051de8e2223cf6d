// zfp codec: fixed-rate ZFP-family coding of float32 blocks. One thread per block.
// Bitstream must match the NumPy backend in custom_ops/zfp.py (see its docstring for the format):
//   blocks: 4x4 over (H, W) planes (two_d = 1) or 4 consecutive elements (two_d = 0), edge-padded
//   9-bit exponent field (0: all-zero block, else emax + 149), q = trunc(x * 2^(26 - emax)) in double,
//   S-transform with doubled sums along rows then columns, sequency order, negabinary,
//   bit planes 31..0 with ZFP's group testing, cut at budget = rate * block size bits.
// Stream bit i = bit (i % 32) of word i / 32; block b starts at bit b * budget. Non-finite inputs are coded
// as 0 (the host keeps them out of band). `data` must be zeroed: words shared by two blocks are OR-ed in.

#define ZFP_PRECISION 26
#define ZFP_EXP_BITS 9
#define ZFP_EXP_BIAS 149
#define ZFP_NB 0xaaaaaaaaull

__constant__ int zfp_perm2[16] = {0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15};

__device__ __forceinline__ void zfp_fwd4(long long* p, int s)
{
    const long long a0 = p[0], a1 = p[s], a2 = p[2 * s], a3 = p[3 * s];
    const long long d0 = a0 - a1;
    const long long s0 = (a1 + (d0 >> 1)) * 2;
    const long long d1 = a2 - a3;
    const long long s1 = (a3 + (d1 >> 1)) * 2;
    const long long dd = s0 - s1;
    const long long ss = (s1 + (dd >> 1)) * 2;
    p[0] = ss; p[s] = dd; p[2 * s] = d0; p[3 * s] = d1;
}

__device__ __forceinline__ void zfp_inv4(long long* p, int s)
{
    const long long ss = p[0], dd = p[s], d0 = p[2 * s], d1 = p[3 * s];
    const long long s1 = (ss >> 1) - (dd >> 1);
    const long long s0 = dd + s1;
    const long long a1 = (s0 >> 1) - (d0 >> 1);
    const long long a0 = d0 + a1;
    const long long a3 = (s1 >> 1) - (d1 >> 1);
    const long long a2 = d1 + a3;
    p[0] = a0; p[s] = a1; p[2 * s] = a2; p[3 * s] = a3;
}

// Flat index of element k (col + 4 * row, or k for 1-D) of block b, edge-clamped.
__device__ __forceinline__ long long zfp_index(long long b, int k, long long n, long long h, long long w, int two_d)
{
    if (!two_d) {
        const long long i = b * 4 + k;
        return i < n ? i : n - 1;
    }
    const long long bc = (w + 3) / 4, br = (h + 3) / 4;
    const long long p = b / (br * bc);
    const long long rem = b - p * br * bc;
    const long long by = rem / bc, bx = rem - by * bc;
    long long r = by * 4 + (k >> 2), c = bx * 4 + (k & 3);
    if (r >= h) r = h - 1;
    if (c >= w) c = w - 1;
    return (p * h + r) * w + c;
}

// Valid (not padding) element? Same geometry as zfp_index.
__device__ __forceinline__ bool zfp_valid(long long b, int k, long long n, long long h, long long w, int two_d)
{
    if (!two_d) return b * 4 + k < n;
    const long long bc = (w + 3) / 4, br = (h + 3) / 4;
    const long long rem = b % (br * bc);
    const long long by = rem / bc, bx = rem - by * bc;
    return by * 4 + (k >> 2) < h && bx * 4 + (k & 3) < w;
}

// CuPy builds may flush float32 subnormals in float arithmetic (FTZ); these two conversions go through the
// bits and float64 so that subnormal inputs and outputs come out as the NumPy backend makes them.
__device__ __forceinline__ double zfp_to_double(unsigned int b)
{
    const unsigned int e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
    const double d = e ? ldexp((double)(m | 0x800000u), (int)e - 150) : ldexp((double)m, -149);
    return (b >> 31) ? -d : d;
}

__device__ __forceinline__ float zfp_to_float(double d)
{
    const double a = fabs(d);
    if (a >= 1.1754943508222875e-38) return __double2float_rn(d);  // normal result: no flush possible
    const unsigned int m = (unsigned int)rint(ldexp(a, 149));  // |d| / 2^-149, RNE
    return __uint_as_float((d < 0.0 ? 0x80000000u : 0u) | m);            // m = 2^23: the smallest normal
}

struct ZfpWriter {
    unsigned int* data;
    unsigned long long bit;   // absolute stream position of the next bit
    unsigned long long end;   // first bit past this block's budget
    unsigned int acc;         // pending bits of word bit / 32
    __device__ void flush() { if (acc) atomicOr(&data[(bit - 1) >> 5], acc); acc = 0; }
    __device__ void put(unsigned int v)
    {
        if (bit >= end) { ++bit; return; }
        acc |= (v & 1u) << (bit & 31);
        ++bit;
        if ((bit & 31) == 0) flush();
    }
    __device__ void close() { if (bit > end) bit = end; if (bit & 31) flush(); }
};

extern "C" __global__ void zfp_encode(const float* __restrict__ x, long long n, long long h, long long w,
                                      long long nblocks, int two_d, int rate, unsigned int* __restrict__ data)
{
    const int size = two_d ? 16 : 4;
    const long long budget = (long long)rate * size;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
        double v[16];
        unsigned int ab = 0u;  // bits of the largest magnitude (uint order = magnitude order when finite)
        for (int k = 0; k < size; ++k) {
            unsigned int fb = __float_as_uint(x[zfp_index(b, k, n, h, w, two_d)]);
            if ((fb & 0x7fffffffu) >= 0x7f800000u) fb = 0u;  // NaN / Inf: coded as 0
            v[k] = zfp_to_double(fb);
            ab = max(ab, fb & 0x7fffffffu);
        }
        ZfpWriter out{data, (unsigned long long)(b * budget), (unsigned long long)((b + 1) * budget), 0u};
        if (ab == 0u) continue;  // exponent field 0, the rest of the block stays zero
        // frexp exponent from the bits (subnormals included): amax < 2^emax
        const int emax = (ab >> 23) ? (int)(ab >> 23) - 126 : (32 - __clz(ab)) - 149;
        const unsigned int efield = (unsigned int)(emax + ZFP_EXP_BIAS);
        for (int i = 0; i < ZFP_EXP_BITS; ++i) out.put(efield >> i);
        long long q[16];
        for (int k = 0; k < size; ++k) q[k] = (long long)trunc(ldexp(v[k], ZFP_PRECISION - emax));
        unsigned int u[16];
        if (two_d) {
            for (int r = 0; r < 4; ++r) zfp_fwd4(q + 4 * r, 1);
            for (int c = 0; c < 4; ++c) zfp_fwd4(q + c, 4);
            for (int i = 0; i < 16; ++i)
                u[i] = (unsigned int)(((unsigned long long)(q[zfp_perm2[i]] + (long long)ZFP_NB) ^ ZFP_NB) & 0xffffffffull);
        } else {
            zfp_fwd4(q, 1);
            for (int i = 0; i < 4; ++i)
                u[i] = (unsigned int)(((unsigned long long)(q[i] + (long long)ZFP_NB) ^ ZFP_NB) & 0xffffffffull);
        }
        int nsig = 0;
        for (int k = 31; k >= 0 && out.bit < out.end; --k) {
            unsigned int xk = 0;
            for (int i = 0; i < size; ++i) xk |= ((u[i] >> k) & 1u) << i;
            int j = 0;
            for (; j < nsig; ++j) out.put(xk >> j);            // already significant: verbatim
            // group tests: "any 1 at >= j?", then the bits up to the next 1 (the last position's 1 implied)
            while (j < size) {
                const unsigned int rest = xk >> j;
                out.put(rest != 0u);
                if (!rest) break;
                while (j < size - 1) {
                    const unsigned int bit = (xk >> j) & 1u;
                    out.put(bit);
                    if (bit) break;
                    ++j;
                }
                ++j;
                nsig = j;
            }
        }
        out.close();
    }
}

struct ZfpReader {
    const unsigned int* data;
    unsigned long long bit, end;
    __device__ bool get(unsigned int* v)   // false once the budget is used up
    {
        if (bit >= end) return false;
        *v = (data[bit >> 5] >> (bit & 31)) & 1u;
        ++bit;
        return true;
    }
};

extern "C" __global__ void zfp_decode(const unsigned int* __restrict__ data, long long n, long long h, long long w,
                                      long long nblocks, int two_d, int rate, float* __restrict__ y,
                                      int* __restrict__ bad)
{
    const int size = two_d ? 16 : 4;
    const long long budget = (long long)rate * size;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const double lim = 3.4028234663852886e38;  // FLT_MAX: finite in, finite out
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
        ZfpReader in{data, (unsigned long long)(b * budget), (unsigned long long)((b + 1) * budget)};
        unsigned int efield = 0, t = 0;
        for (int i = 0; i < ZFP_EXP_BITS; ++i) { in.get(&t); efield |= t << i; }
        float out[16];
        if (efield == 0) {
            for (int k = 0; k < size; ++k) out[k] = 0.0f;
        } else {
            if (efield > 128 + ZFP_EXP_BIAS) { atomicOr(bad, 1); efield = 128 + ZFP_EXP_BIAS; }
            const int emax = (int)efield - ZFP_EXP_BIAS;
            unsigned int u[16];
            for (int i = 0; i < 16; ++i) u[i] = 0u;
            int nsig = 0;
            bool live = true;
            for (int k = 31; k >= 0 && live; --k) {
                unsigned int xk = 0, v = 0;
                int j = 0;
                for (; j < nsig && live; ++j) {
                    live = in.get(&v);
                    if (live) xk |= v << j;
                }
                while (live && j < size) {
                    live = in.get(&v);
                    if (!live || !v) break;
                    while (j < size - 1) {
                        live = in.get(&v);
                        if (!live) break;
                        if (v) { xk |= 1u << j; break; }
                        ++j;
                    }
                    if (!live) break;
                    if (j == size - 1) xk |= 1u << j;  // implied 1 at the last position
                    ++j;
                    nsig = j;
                }
                for (int i = 0; i < size; ++i) u[i] |= ((xk >> i) & 1u) << k;
            }
            long long q[16];
            if (two_d) {
                for (int i = 0; i < 16; ++i) q[zfp_perm2[i]] = (long long)(u[i] ^ (unsigned int)ZFP_NB) - (long long)ZFP_NB;
                for (int c = 0; c < 4; ++c) zfp_inv4(q + c, 4);
                for (int r = 0; r < 4; ++r) zfp_inv4(q + 4 * r, 1);
            } else {
                for (int i = 0; i < 4; ++i) q[i] = (long long)(u[i] ^ (unsigned int)ZFP_NB) - (long long)ZFP_NB;
                zfp_inv4(q, 1);
            }
            for (int k = 0; k < size; ++k) {
                double d = ldexp((double)q[k], emax - ZFP_PRECISION);
                d = fmin(fmax(d, -lim), lim);
                out[k] = zfp_to_float(d);
            }
        }
        for (int k = 0; k < size; ++k)
            if (zfp_valid(b, k, n, h, w, two_d)) y[zfp_index(b, k, n, h, w, two_d)] = out[k];
    }
}
