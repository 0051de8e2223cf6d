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
    __shared__ int warp_cnt[ZVC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const long long i = t * ZVC_TILE + threadIdx.x;
        const unsigned int m = __ballot_sync(0xffffffffu, i < n && x[i] != 0u);
        // A warp's 32 bits are 4 consecutive bitmap bytes; lanes 0..3 write one byte each.
        const long long b = (t * ZVC_TILE + warp * 32) >> 3;
        if (lane < 4 && b + lane < nbytes) bitmap[b + lane] = (unsigned char)(m >> (8 * lane));
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        if (threadIdx.x == 0) tile_counts[t] = zvc_warp_prefix(warp_cnt, ZVC_WARPS);
        __syncthreads();
    }
}

extern "C" __global__ void zvc_encode_scatter(const unsigned int* __restrict__ x, long long n,
                                              const long long* __restrict__ tile_offsets,
                                              unsigned int* __restrict__ values, long long ntiles)
{
    __shared__ int warp_cnt[ZVC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const long long i = t * ZVC_TILE + threadIdx.x;
        const unsigned int v = i < n ? x[i] : 0u;
        const unsigned int m = __ballot_sync(0xffffffffu, v != 0u);
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        if (v != 0u)
            values[tile_offsets[t] + zvc_warp_prefix(warp_cnt, warp) + __popc(m & ((1u << lane) - 1u))] = v;
        __syncthreads();
    }
}

extern "C" __global__ void zvc_decode_count(const unsigned char* __restrict__ bitmap, long long n,
                                            int* __restrict__ tile_counts, long long ntiles)
{
    __shared__ int warp_cnt[ZVC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const unsigned int m = __ballot_sync(0xffffffffu, zvc_bit(bitmap, t * ZVC_TILE + threadIdx.x, n));
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        if (threadIdx.x == 0) tile_counts[t] = zvc_warp_prefix(warp_cnt, ZVC_WARPS);
        __syncthreads();
    }
}

extern "C" __global__ void zvc_decode_scatter(const unsigned char* __restrict__ bitmap,
                                              const unsigned int* __restrict__ values,
                                              const long long* __restrict__ tile_offsets, long long n,
                                              unsigned int* __restrict__ out, long long ntiles)
{
    __shared__ int warp_cnt[ZVC_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const long long i = t * ZVC_TILE + threadIdx.x;
        const bool bit = zvc_bit(bitmap, i, n);
        const unsigned int m = __ballot_sync(0xffffffffu, bit);
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        if (i < n)
            out[i] = bit ? values[tile_offsets[t] + zvc_warp_prefix(warp_cnt, warp)
                                  + __popc(m & ((1u << lane) - 1u))]
                         : 0u;
        __syncthreads();
    }
}
