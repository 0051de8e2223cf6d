// sz codec: dual quantization + block-reset 1-D Lorenzo + cuSZp-style fixed-length blocks.
// Byte layout must match the NumPy backend in custom_ops/sz.py:
//   q      = rint(x * recip) in float64, recip = 1 / (2 eb) computed once on the host;
//            |q| > SZ_QMAX, NaN or Inf -> q = 0 and the element is an outlier
//   x_hat  = (float)(2 eb * q); |x - x_hat| > eb (checked in float64) -> outlier (index + raw bits, on host)
//   d[i]   = q[i] - q[i-1], d[i] = q[i] at each 32-element block start, d = 0 past n
//   rates  : uint8 per block, bit length of max |d| (0..31)
//   data   : per block with r > 0, r + 1 little-endian 32-bit words at word offset woff[b] (exclusive prefix
//            sum of r + 1 over blocks, computed by cupy.cumsum): sign plane (bit k = d[k] < 0), then
//            magnitude planes j = 0..r-1 (bit k = bit j of |d[k]|)
// One warp per block: lane k holds element k, ballots build the planes, a shuffle scan undoes Lorenzo.
// The float64 ops use explicit _rn intrinsics so no FMA contraction can make the GPU differ from NumPy.

#define SZ_BLOCK 32
#define SZ_QMAX 1073741823
#define SZ_FULL 0xffffffffu

__device__ __forceinline__ int sz_quant(float xf, double recip, double twoeb, double eb, bool* outlier)
{
    const double xd = (double)xf;
    double qf = rint(__dmul_rn(xd, recip));
    const bool ok = fabs(qf) <= (double)SZ_QMAX;          // false for NaN / Inf / too large
    qf = ok ? qf : 0.0;
    const float xh = __double2float_rn(__dmul_rn(qf, twoeb));
    const double err = fabs(__dsub_rn(xd, (double)xh));
    *outlier = !(err <= eb);                              // NaN error (x NaN / Inf) is an outlier too
    return (int)qf;
}

// Lorenzo delta of this lane's q within the warp's block; 0 for padding lanes.
__device__ __forceinline__ int sz_delta(int q, int lane, bool valid)
{
    const int prev = __shfl_up_sync(SZ_FULL, q, 1);
    const int d = lane == 0 ? q : q - prev;
    return valid ? d : 0;
}

__device__ __forceinline__ unsigned int sz_abs(int d)
{
    return d < 0 ? (unsigned int)(-d) : (unsigned int)d;  // |d| < 2^31 since |q| <= SZ_QMAX
}

// Each warp takes SZ_K consecutive blocks per step and issues all their loads before any arithmetic: one
// 128-byte load per warp in flight was the limit (latency-bound at about 1 TB/s on an H100).
#define SZ_K 4

__device__ __forceinline__ unsigned int sz_lanes_below(int lane) { return (1u << lane) - 1u; }

// Pass 1: per-block bit width and outlier count.
extern "C" __global__ void sz_encode_rates(const float* __restrict__ x, long long n, long long nblocks,
                                           double recip, double twoeb, double eb,
                                           unsigned char* __restrict__ rates,
                                           unsigned char* __restrict__ outlier_counts)
{
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long b0 = warp * SZ_K; b0 < nblocks; b0 += nwarps * SZ_K) {   // uniform across the warp
        float v[SZ_K];
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) {
            const long long i = (b0 + k) * SZ_BLOCK + lane;
            v[k] = i < n ? x[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) {
            const long long b = b0 + k;
            if (b >= nblocks) break;                                    // uniform
            const bool valid = b * SZ_BLOCK + lane < n;
            bool out = false;
            const int q = valid ? sz_quant(v[k], recip, twoeb, eb, &out) : 0;
            const unsigned int outs = __ballot_sync(SZ_FULL, valid && out);
            unsigned int m = sz_abs(sz_delta(q, lane, valid));
            for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(SZ_FULL, m, o));
            if (lane == 0) {
                rates[b] = (unsigned char)(m ? 32 - __clz(m) : 0);
                outlier_counts[b] = (unsigned char)__popc(outs);
            }
        }
    }
}

// Pass 2: write each nonzero block's sign plane and r magnitude planes at its word offset, and each outlier's
// flat index and raw bits at its place in the (ascending) outlier list.
extern "C" __global__ void sz_encode_pack(const float* __restrict__ x, long long n, long long nblocks,
                                          double recip, double twoeb, const unsigned char* __restrict__ rates,
                                          const unsigned char* __restrict__ outlier_counts,
                                          const long long* __restrict__ woff, const long long* __restrict__ ooff,
                                          unsigned int* __restrict__ data, long long* __restrict__ outlier_idx,
                                          unsigned int* __restrict__ outlier_bits)
{
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    const double eb = 0.5 * twoeb;  // exact (power-of-two scaling)
    for (long long b0 = warp * SZ_K; b0 < nblocks; b0 += nwarps * SZ_K) {
        int r[SZ_K];
        bool busy[SZ_K];
        float v[SZ_K];
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) {
            const long long b = b0 + k;
            r[k] = b < nblocks ? rates[b] : 0;
            busy[k] = b < nblocks && (r[k] > 0 || outlier_counts[b] > 0);  // uniform: same b for the warp
        }
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) {
            const long long i = (b0 + k) * SZ_BLOCK + lane;
            v[k] = busy[k] && i < n ? x[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) {
            if (!busy[k]) continue;
            const long long b = b0 + k;
            const long long i = b * SZ_BLOCK + lane;
            const bool valid = i < n;
            bool out = false;
            const int q = valid ? sz_quant(v[k], recip, twoeb, eb, &out) : 0;
            const unsigned int outs = __ballot_sync(SZ_FULL, valid && out);
            if (valid && out) {
                const long long at = ooff[b] + __popc(outs & sz_lanes_below(lane));
                outlier_idx[at] = i;
                outlier_bits[at] = __float_as_uint(v[k]);
            }
            if (r[k] == 0) continue;
            const int d = sz_delta(q, lane, valid);
            const unsigned int mag = sz_abs(d);
            // word w of the block: 0 = sign plane, 1 + j = magnitude plane j; lane w keeps word w.
            unsigned int mine = __ballot_sync(SZ_FULL, d < 0);
            for (int j = 0; j < r[k]; ++j) {
                const unsigned int plane = __ballot_sync(SZ_FULL, (mag >> j) & 1u);
                if (lane == j + 1) mine = plane;
            }
            if (lane <= r[k]) data[woff[b] + lane] = mine;               // r <= 31: at most 32 words
        }
    }
}

// Decode: gather the block's words, rebuild d, inclusive warp scan -> q, x_hat = (float)(2 eb q).
// Outliers are patched afterwards by the host (scatter of raw bits).
extern "C" __global__ void sz_decode(const unsigned char* __restrict__ rates, const long long* __restrict__ woff,
                                     const unsigned int* __restrict__ data, long long n, long long nblocks,
                                     double twoeb, float* __restrict__ y)
{
    const int lane = threadIdx.x & 31;
    const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const long long nwarps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long b0 = warp * SZ_K; b0 < nblocks; b0 += nwarps * SZ_K) {
        int r[SZ_K];
        long long off[SZ_K];
        unsigned int w[SZ_K];
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) r[k] = b0 + k < nblocks ? rates[b0 + k] : 0;
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) off[k] = r[k] > 0 ? woff[b0 + k] : 0;
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) w[k] = lane <= r[k] && r[k] > 0 ? data[off[k] + lane] : 0u;
#pragma unroll
        for (int k = 0; k < SZ_K; ++k) {
            const long long b = b0 + k;
            if (b >= nblocks) break;                                    // uniform
            int v = 0;
            if (r[k] > 0) {                                             // uniform across the warp
                const unsigned int sign = __shfl_sync(SZ_FULL, w[k], 0);
                unsigned int mag = 0;
                for (int j = 0; j < r[k]; ++j) {
                    const unsigned int plane = __shfl_sync(SZ_FULL, w[k], j + 1);
                    mag |= ((plane >> lane) & 1u) << j;
                }
                v = ((sign >> lane) & 1u) ? -(int)mag : (int)mag;
            }
            for (int o = 1; o < 32; o <<= 1) {
                const int t = __shfl_up_sync(SZ_FULL, v, o);
                if (lane >= o) v += t;
            }
            const long long i = b * SZ_BLOCK + lane;
            if (i < n) y[i] = __double2float_rn(__dmul_rn((double)v, twoeb));
        }
    }
}
