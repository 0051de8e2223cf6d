// Narrow-index CSR (Gist's SSDC with "Narrow Value Optimization", ISCA'18 §IV-A): the flattened tensor is
// viewed as rows of CSR_ROW = 256 elements so a column index fits in one byte. Byte layout must match
// the NumPy backend in custom_ops/sparse.py:
//   values:  32-bit words [nnz], nonzero words in element (row-major) order
//   cols:    uint8[nnz], column (i & 255) of each nonzero
//   row_ptr: int32[nrows + 1], row_ptr[0] = 0, nrows = ceil(n / 256) (last row may be short)
// Elements are moved as raw 32-bit words: "nonzero" is bitwise (-0.0 and NaN payloads are kept).
//
// One block of CSR_ROW threads (8 warps) handles one row per grid-stride iteration, thread t = column t.
// Pass 1 writes per-row counts, the host scans them (cupy.cumsum) into row_ptr, pass 2 scatters.

#define CSR_ROW 256
#define CSR_WARPS (CSR_ROW / 32)

// Nonzeros in the warps before `warp` within the row (warp == CSR_WARPS gives the row total).
__device__ __forceinline__ int csr_warp_prefix(const int* warp_cnt, int warp)
{
    int s = 0;
    for (int w = 0; w < warp; ++w) s += warp_cnt[w];
    return s;
}

extern "C" __global__ void csr_encode_count(const unsigned int* __restrict__ x, long long n,
                                            int* __restrict__ row_counts, long long nrows)
{
    __shared__ int warp_cnt[CSR_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {
        const long long i = r * CSR_ROW + threadIdx.x;
        const unsigned int m = __ballot_sync(0xffffffffu, i < n && x[i] != 0u);
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        if (threadIdx.x == 0) row_counts[r] = csr_warp_prefix(warp_cnt, CSR_WARPS);
        __syncthreads();
    }
}

extern "C" __global__ void csr_encode_scatter(const unsigned int* __restrict__ x, long long n,
                                              const int* __restrict__ row_ptr,
                                              unsigned int* __restrict__ values,
                                              unsigned char* __restrict__ cols, long long nrows)
{
    __shared__ int warp_cnt[CSR_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {
        const long long i = r * CSR_ROW + threadIdx.x;
        const unsigned int v = i < n ? x[i] : 0u;
        const unsigned int m = __ballot_sync(0xffffffffu, v != 0u);
        if (lane == 0) warp_cnt[warp] = __popc(m);
        __syncthreads();
        if (v != 0u) {
            const long long pos = (long long)row_ptr[r] + csr_warp_prefix(warp_cnt, warp)
                                  + __popc(m & ((1u << lane) - 1u));
            values[pos] = v;
            cols[pos] = (unsigned char)threadIdx.x;
        }
        __syncthreads();
    }
}

// Rows are rebuilt in shared memory (zero, scatter by column, then one coalesced store), so the output
// needs no separate memset and every element is written exactly once.
extern "C" __global__ void csr_decode(const unsigned int* __restrict__ values,
                                      const unsigned char* __restrict__ cols,
                                      const int* __restrict__ row_ptr, long long n,
                                      unsigned int* __restrict__ out, long long nrows)
{
    __shared__ unsigned int row[CSR_ROW];
    for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {
        row[threadIdx.x] = 0u;
        __syncthreads();
        const long long j = (long long)row_ptr[r] + threadIdx.x;
        if (j < row_ptr[r + 1]) row[cols[j]] = values[j];
        __syncthreads();
        const long long i = r * CSR_ROW + threadIdx.x;
        if (i < n) out[i] = row[threadIdx.x];
        __syncthreads();
    }
}
