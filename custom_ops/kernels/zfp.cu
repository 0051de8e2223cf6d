// zfp codec, bitstream v3: fixed-rate ZFP-family coding of float32 blocks. One thread per block.
// Bitstream must match the NumPy backend in custom_ops/zfp.py (see its docstring for the format):
//   blocks: 4x4 over (H, W) planes (two_d = 1) or 4 consecutive elements (two_d = 0), edge-padded
//   9-bit exponent field (0: all-zero block, else emax + 149), q = trunc(x * 2^(26 - emax)),
//   ZFP's lifting along rows then columns, sequency order, groups of 1,2,3,4,6 coefficients (1-D: one of 4),
//   2-bit fields e0, d_1.. of the declared bounds D_g, step s from the budget, leftover bits to the leading
//   coefficients, every coefficient as w bits of two's complement of round-half-up(c / 2^t).
// Stream bit i = bit (i % 32) of word i / 32; block b starts at bit b * budget. Non-finite inputs are coded
// as 0 (the host keeps them out of band). `data` must be zeroed: words shared by two blocks are OR-ed in.
// The lifting runs in 64-bit integers; its values stay within 32 bits (zfp.py), so it equals the CPU's int32.

#define ZFP_PRECISION 26
#define ZFP_LCAP 27
#define ZFP_EXP_BITS 9
#define ZFP_EXP_BIAS 149
#define ZFP_FIELD_BITS 2

__constant__ int zfp_perm2[16] = {0, 1, 4, 5, 2, 8, 6, 9, 3, 12, 10, 7, 13, 11, 14, 15};
__constant__ int zfp_gs2[5] = {1, 2, 3, 4, 6};

__device__ __forceinline__ void zfp_fwd4(long long* p, int s)
{
    long long x = p[0], y = p[s], z = p[2 * s], w = p[3 * s];
    x += w; x >>= 1; w -= x;
    z += y; z >>= 1; y -= z;
    x += z; x >>= 1; z -= x;
    w += y; w >>= 1; y -= w;
    w += y >> 1; y -= w >> 1;
    p[0] = x; p[s] = y; p[2 * s] = z; p[3 * s] = w;
}

__device__ __forceinline__ void zfp_inv4(long long* p, int s)
{
    long long x = p[0], y = p[s], z = p[2 * s], w = p[3 * s];
    y += w >> 1; w -= y >> 1;
    y += w; w <<= 1; w -= y;
    z += x; x <<= 1; x -= z;
    y += z; z <<= 1; z -= y;
    w += x; x <<= 1; x -= w;
    p[0] = x; p[s] = y; p[2 * s] = z; p[3 * s] = w;
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

__device__ __forceinline__ int zfp_bitlen(long long v)  // v >= 0
{
    return v ? 64 - __clzll(v) : 0;
}

// Step exponent s and U (coefficients that take a leftover bit) from the declared bounds D[0..ng).
__device__ __forceinline__ void zfp_step(const int* D, int ng, const int* gs, int avail, int* s_out, int* u_out)
{
    int s = 0;
    for (int p = 0; p <= ZFP_LCAP + 1; ++p) {  // the total falls with p: count the steps that do not fit
        int tot = 0;
        for (int g = 0; g < ng; ++g) tot += gs[g] * max(0, D[g] - p + 1);
        s += tot > avail;
    }
    int tot = 0, ne = 0;
    for (int g = 0; g < ng; ++g) {
        tot += gs[g] * max(0, D[g] - s + 1);
        if (s > 0 && D[g] >= s - 1) ne += gs[g];
    }
    *s_out = s;
    *u_out = min(ne, avail - tot);
}

// OR the low `nbits` (<= 32) bits of v into the stream at bit `pos`.
__device__ __forceinline__ void zfp_put(unsigned int* data, unsigned long long pos, unsigned int v, int nbits)
{
    if (nbits == 0 || v == 0u) return;
    const int sh = (int)(pos & 31);
    atomicOr(&data[pos >> 5], v << sh);
    if (sh + nbits > 32) atomicOr(&data[(pos >> 5) + 1], v >> (32 - sh));
}

__device__ __forceinline__ unsigned int zfp_get(const unsigned int* data, unsigned long long pos, int nbits)
{
    if (nbits == 0) return 0u;
    const int sh = (int)(pos & 31);
    unsigned long long v = (unsigned long long)data[pos >> 5] >> sh;
    if (sh + nbits > 32) v |= (unsigned long long)data[(pos >> 5) + 1] << (32 - sh);
    return (unsigned int)(v & ((1ull << nbits) - 1ull));
}

extern "C" __global__ void zfp_encode(const float* __restrict__ x, long long n, long long h, long long w,
                                      long long nblocks, int two_d, int rate, unsigned int* __restrict__ data)
{
    const int size = two_d ? 16 : 4;
    const int ng = two_d ? 5 : 1;
    const int gs1[1] = {4};
    const int* gs = two_d ? zfp_gs2 : gs1;
    const long long budget = (long long)rate * size;
    const int hdr = ZFP_EXP_BITS + ZFP_FIELD_BITS * ng;
    const int avail = (int)budget - hdr;
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
        if (ab == 0u) continue;  // exponent field 0, the rest of the block stays zero
        // frexp exponent from the bits (subnormals included): amax < 2^emax
        const int emax = (ab >> 23) ? (int)(ab >> 23) - 126 : (32 - __clz(ab)) - 149;
        long long q[16], c[16];
        for (int k = 0; k < size; ++k) q[k] = (long long)trunc(ldexp(v[k], ZFP_PRECISION - emax));
        if (two_d) {
            for (int r = 0; r < 4; ++r) zfp_fwd4(q + 4 * r, 1);
            for (int cc = 0; cc < 4; ++cc) zfp_fwd4(q + cc, 4);
            for (int i = 0; i < 16; ++i) c[i] = q[zfp_perm2[i]];
        } else {
            zfp_fwd4(q, 1);
            for (int i = 0; i < 4; ++i) c[i] = q[i];
        }
        int L[5], D[5];
        for (int g = 0, i = 0; g < ng; ++g) {
            long long m = 0;
            for (int k = 0; k < gs[g]; ++k, ++i) m = max(m, c[i] < 0 ? -c[i] : c[i]);
            L[g] = zfp_bitlen(m);
        }
        for (int g = ng - 2; g >= 0; --g) L[g] = max(L[g], L[g + 1]);  // suffix maxima
        unsigned int code = (unsigned int)(emax + ZFP_EXP_BIAS);
        int f = min(ZFP_LCAP - L[0], 3);
        D[0] = ZFP_LCAP - f;
        code |= (unsigned int)f << ZFP_EXP_BITS;
        for (int g = 1; g < ng; ++g) {
            f = min(D[g - 1] - L[g], 3);
            D[g] = D[g - 1] - f;
            code |= (unsigned int)f << (ZFP_EXP_BITS + ZFP_FIELD_BITS * g);
        }
        unsigned long long pos = (unsigned long long)(b * budget);
        zfp_put(data, pos, code, hdr);
        pos += hdr;
        int s, u;
        zfp_step(D, ng, gs, avail, &s, &u);
        for (int g = 0, i = 0; g < ng; ++g) {
            for (int k = 0; k < gs[g]; ++k, ++i) {
                const int up = i < u;
                const int wd = max(0, D[g] - s + 1) + up, t = s - up;
                long long r = (c[i] + ((1ll << t) >> 1)) >> t;
                const long long lim = (1ll << wd) >> 1;
                r = min(max(r, -lim), lim - 1);
                zfp_put(data, pos, (unsigned int)((unsigned long long)r & ((1ull << wd) - 1ull)), wd);
                pos += wd;
            }
        }
    }
}

extern "C" __global__ void zfp_decode(const unsigned int* __restrict__ data, long long n, long long h, long long w,
                                      long long nblocks, int two_d, int rate, float* __restrict__ y,
                                      int* __restrict__ bad)
{
    const int size = two_d ? 16 : 4;
    const int ng = two_d ? 5 : 1;
    const int gs1[1] = {4};
    const int* gs = two_d ? zfp_gs2 : gs1;
    const long long budget = (long long)rate * size;
    const int hdr = ZFP_EXP_BITS + ZFP_FIELD_BITS * ng;
    const int avail = (int)budget - hdr;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const double lim = 3.4028234663852886e38;  // FLT_MAX: finite in, finite out
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += stride) {
        unsigned long long pos = (unsigned long long)(b * budget);
        unsigned int efield = zfp_get(data, pos, ZFP_EXP_BITS);
        float out[16];
        if (efield == 0) {
            for (int k = 0; k < size; ++k) out[k] = 0.0f;
        } else {
            if (efield > 128 + ZFP_EXP_BIAS) { atomicOr(bad, 1); efield = 128 + ZFP_EXP_BIAS; }
            const int emax = (int)efield - ZFP_EXP_BIAS;
            pos += ZFP_EXP_BITS;
            int D[5], d = ZFP_LCAP;
            for (int g = 0; g < ng; ++g) {
                d -= (int)zfp_get(data, pos, ZFP_FIELD_BITS);
                pos += ZFP_FIELD_BITS;
                D[g] = d;
            }
            int s, u;
            zfp_step(D, ng, gs, avail, &s, &u);
            long long q[16];
            for (int g = 0, i = 0; g < ng; ++g) {
                for (int k = 0; k < gs[g]; ++k, ++i) {
                    const int up = i < u;
                    const int wd = max(0, D[g] - s + 1) + up, t = s - up;
                    const long long raw = (long long)zfp_get(data, pos, wd);
                    pos += wd;
                    const long long sgn = (1ll << wd) >> 1;
                    const long long cval = ((raw ^ sgn) - sgn) * (1ll << t);
                    q[two_d ? zfp_perm2[i] : i] = cval;
                }
            }
            if (two_d) {
                for (int cc = 0; cc < 4; ++cc) zfp_inv4(q + cc, 4);
                for (int r = 0; r < 4; ++r) zfp_inv4(q + 4 * r, 1);
            } else {
                zfp_inv4(q, 1);
            }
            for (int k = 0; k < size; ++k) {
                double dv = ldexp((double)q[k], emax - ZFP_PRECISION);
                dv = fmin(fmax(dv, -lim), lim);
                out[k] = zfp_to_float(dv);
            }
        }
        for (int k = 0; k < size; ++k)
            if (zfp_valid(b, k, n, h, w, two_d)) y[zfp_index(b, k, n, h, w, two_d)] = out[k];
    }
}
