// ZVC (zero-value compression, CSWAP+ §5.2.1 / cDMA): a nonzero bitmap plus the nonzero values packed
// in element order. Byte layout must match the NumPy backend in custom_ops/sparse.py:
//   bitmap: uint8[ceil(n/8)], bit (i & 7) of byte (i >> 3) set iff word i != 0 (little-endian bit order,
//           padding bits of the last byte are zero)
//   values: 32-bit words [nnz], the nonzero words in element order
// Elements are moved as raw 32-bit words: "nonzero" is bitwise (-0.0 and NaN payloads are kept) and no
// float instruction ever touches them.
//
// Work decomposition: blockDim.x == ZVC_TILE (8 warps); each block walks tiles of ZVC_TILE consecutive
// elements with a grid-stride loop. Pass 1 writes per-tile counts, the host scans them (cupy.cumsum) into
// exclusive per-tile offsets, pass 2 scatters with warp ballots + a per-tile warp prefix in shared memory.

#define ZVC_TILE 256
#define ZVC_WARPS (ZVC_TILE / 32)
// Tiles per block step: every thread issues ZVC_K loads before its first ballot, so enough bytes are in
// flight to stream at memory speed (one 4-byte load per thread per step was latency-bound).
#define ZVC_K 4

__device__ __forceinline__ bool zvc_bit(const unsigned char* __restrict__ bitmap, long long i, long long n)
{
    return i < n && ((bitmap[i >> 3] >> (i & 7)) & 1u);
}

// Nonzeros in the warps before `warp` within the tile (warp == ZVC_WARPS gives the tile total).
__device__ __forceinline__ int zvc_warp_prefix(const int* warp_cnt, int warp)
{
    int s = 0;
    for (int w = 0; w < warp; ++w) s += warp_cnt[w];
    return s;
}

extern "C" __global__ void zvc_encode_count(const unsigned int* __restrict__ x, long long n,
                                            unsigned char* __restrict__ bitmap, long long nbytes,
                                            int* __restrict__ tile_counts, long long ntiles)
{
    __shared__ int warp_cnt[ZVC_K][ZVC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long t0 = (long long)blockIdx.x * ZVC_K; t0 < ntiles; t0 += (long long)gridDim.x * ZVC_K) {
        unsigned int v[ZVC_K];
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            const long long i = (t0 + k) * ZVC_TILE + threadIdx.x;
            v[k] = i < n ? x[i] : 0u;
        }
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            const unsigned int m = __ballot_sync(0xffffffffu, v[k] != 0u);
            // A warp's 32 bits are 4 consecutive bitmap bytes: one 4-byte store when all 4 exist (the bitmap
            // is CuPy-allocated, so word aligned), else lanes 0..3 store a byte each.
            const long long b = ((t0 + k) * ZVC_TILE + warp * 32) >> 3;
            if (b + 4 <= nbytes) {
                if (lane == 0) *reinterpret_cast<unsigned int*>(bitmap + b) = m;
            } else if (lane < 4 && b + lane < nbytes) {
                bitmap[b + lane] = (unsigned char)(m >> (8 * lane));
            }
            if (lane == 0) warp_cnt[k][warp] = __popc(m);
        }
        __syncthreads();
        if (threadIdx.x < ZVC_K && t0 + threadIdx.x < ntiles)
            tile_counts[t0 + threadIdx.x] = zvc_warp_prefix(warp_cnt[threadIdx.x], ZVC_WARPS);
        __syncthreads();
    }
}

extern "C" __global__ void zvc_encode_scatter(const unsigned int* __restrict__ x, long long n,
                                              const long long* __restrict__ tile_offsets,
                                              unsigned int* __restrict__ values, long long ntiles)
{
    __shared__ int warp_cnt[ZVC_K][ZVC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long t0 = (long long)blockIdx.x * ZVC_K; t0 < ntiles; t0 += (long long)gridDim.x * ZVC_K) {
        unsigned int v[ZVC_K], m[ZVC_K];
        long long off[ZVC_K];
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            const long long i = (t0 + k) * ZVC_TILE + threadIdx.x;
            v[k] = i < n ? x[i] : 0u;
            off[k] = t0 + k < ntiles ? tile_offsets[t0 + k] : 0;
        }
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            m[k] = __ballot_sync(0xffffffffu, v[k] != 0u);
            if (lane == 0) warp_cnt[k][warp] = __popc(m[k]);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            if (v[k] != 0u)
                values[off[k] + zvc_warp_prefix(warp_cnt[k], warp) + __popc(m[k] & ((1u << lane) - 1u))] = v[k];
        }
        __syncthreads();
    }
}

// Decode pass 1: a thread per tile adds the popcounts of its 32 bitmap bytes (no element-wise work).
extern "C" __global__ void zvc_decode_count(const unsigned char* __restrict__ bitmap, long long n,
                                            int* __restrict__ tile_counts, long long ntiles)
{
    const long long nbytes = (n + 7) >> 3;
    const bool aligned = ((unsigned long long)bitmap & 15ull) == 0;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < ntiles; t += stride) {
        const long long b0 = t * (ZVC_TILE / 8);
        int c = 0;
        if (aligned && (t + 1) * ZVC_TILE <= n) {  // a whole tile: no padding bits inside
            const uint4* w = reinterpret_cast<const uint4*>(bitmap + b0);
            const uint4 a = w[0], b = w[1];
            c = __popc(a.x) + __popc(a.y) + __popc(a.z) + __popc(a.w) + __popc(b.x) + __popc(b.y) + __popc(b.z)
                + __popc(b.w);
        } else {
            for (long long b = b0; b < b0 + ZVC_TILE / 8 && b < nbytes; ++b) {
                // padding bits past n are not counted (a corrupt payload may set them)
                const long long valid = n - 8 * b;
                const unsigned int mask = valid >= 8 ? 0xffu : ((1u << valid) - 1u);
                c += __popc(bitmap[b] & mask);
            }
        }
        tile_counts[t] = c;
    }
}

extern "C" __global__ void zvc_decode_scatter(const unsigned char* __restrict__ bitmap,
                                              const unsigned int* __restrict__ values,
                                              const long long* __restrict__ tile_offsets, long long n,
                                              unsigned int* __restrict__ out, long long ntiles)
{
    __shared__ int warp_cnt[ZVC_K][ZVC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long t0 = (long long)blockIdx.x * ZVC_K; t0 < ntiles; t0 += (long long)gridDim.x * ZVC_K) {
        bool bit[ZVC_K];
        unsigned int m[ZVC_K], v[ZVC_K];
        long long off[ZVC_K];
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            bit[k] = zvc_bit(bitmap, (t0 + k) * ZVC_TILE + threadIdx.x, n);
            off[k] = t0 + k < ntiles ? tile_offsets[t0 + k] : 0;
        }
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            m[k] = __ballot_sync(0xffffffffu, bit[k]);
            if (lane == 0) warp_cnt[k][warp] = __popc(m[k]);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k)
            v[k] = bit[k] ? values[off[k] + zvc_warp_prefix(warp_cnt[k], warp) + __popc(m[k] & ((1u << lane) - 1u))]
                          : 0u;
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            const long long i = (t0 + k) * ZVC_TILE + threadIdx.x;
            if (i < n) out[i] = v[k];
        }
        __syncthreads();
    }
}
