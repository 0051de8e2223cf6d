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

// Bitmap word (32 elements) at byte offset b, bits past n cleared (a corrupt payload may set them).
__device__ __forceinline__ unsigned int zvc_word(const unsigned char* __restrict__ bitmap, long long b, long long n,
                                                 bool aligned)
{
    const long long nbytes = (n + 7) >> 3;
    unsigned int w = 0;
    if (aligned && b + 4 <= nbytes) {
        w = *reinterpret_cast<const unsigned int*>(bitmap + b);
    } else {
        for (int q = 0; q < 4; ++q)
            if (b + q < nbytes) w |= (unsigned int)bitmap[b + q] << (8 * q);
    }
    const long long valid = n - 8 * b;  // elements of this word that exist
    return valid >= 32 ? w : (valid <= 0 ? 0u : (w & ((1u << valid) - 1u)));
}

// For tile t and the calling warp: the warp's bitmap word and the nonzeros of the warps before it in the tile,
// both read off the bitmap (lanes 0..7 load the tile's 8 words), so no shared memory and no block barrier.
__device__ __forceinline__ void zvc_tile_word(const unsigned char* __restrict__ bitmap, long long t, long long n,
                                              bool aligned, int lane, int warp, unsigned int* word, int* prefix)
{
    const unsigned int wj = lane < ZVC_WARPS ? zvc_word(bitmap, t * (ZVC_TILE / 8) + 4 * lane, n, aligned) : 0u;
    *word = __shfl_sync(0xffffffffu, wj, warp);
    int c = lane < warp ? __popc(wj) : 0;
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);  // lanes 0..7 hold the counts
    *prefix = __shfl_sync(0xffffffffu, c, 0);
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

// Encode pass 2: ballots + per-tile warp counts in shared memory (49 us on 64 MiB, where reading the
// prefixes off the bitmap as the decoder does took 59 us).
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

// Decode pass 2: the same per-warp word and prefix from the bitmap; each set bit gathers its value.
extern "C" __global__ void zvc_decode_scatter(const unsigned char* __restrict__ bitmap,
                                              const unsigned int* __restrict__ values,
                                              const long long* __restrict__ tile_offsets, long long n,
                                              unsigned int* __restrict__ out, long long ntiles)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const bool aligned = ((unsigned long long)bitmap & 3ull) == 0;
    for (long long t0 = (long long)blockIdx.x * ZVC_K; t0 < ntiles; t0 += (long long)gridDim.x * ZVC_K) {
        unsigned int m[ZVC_K], v[ZVC_K];
        int pre[ZVC_K];
        long long off[ZVC_K];
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            m[k] = 0u;
            pre[k] = 0;
            off[k] = t0 + k < ntiles ? tile_offsets[t0 + k] : 0;
            if (t0 + k < ntiles) zvc_tile_word(bitmap, t0 + k, n, aligned, lane, warp, &m[k], &pre[k]);  // uniform
        }
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k)
            v[k] = ((m[k] >> lane) & 1u) ? values[off[k] + pre[k] + __popc(m[k] & ((1u << lane) - 1u))] : 0u;
#pragma unroll
        for (int k = 0; k < ZVC_K; ++k) {
            const long long i = (t0 + k) * ZVC_TILE + threadIdx.x;
            if (i < n) out[i] = v[k];
        }
    }
}
