// maxpool_index codec: MaxPool's int64 indices (absolute flat NCHW offsets into the pool input,
// ((n*C + c)*H + h)*W + w) stored as their offset inside the pooling window, k = kh_idx*KW + kw_idx, where
// the window of output (oh, ow) starts at (oh*SH - PT, ow*SW - PL) and covers
// (start_h + kh_idx*DH, start_w + kw_idx*DW).
// Packing: a little-endian bit stream, stream bit j = bit (j % 8) of byte j / 8; offset e (flat NCHW order
// of the index tensor) occupies stream bits [e*BITS, (e+1)*BITS), least significant bit first; unused bits
// of the last byte are 0. Encode runs one thread per output byte, recomputing the (at most 8 + 1) offsets
// that touch it, so every byte is written whole by exactly one thread (no atomics on data).

// Geometry is passed as scalar kernel arguments (CuPy marshals scalars, not structs) and bundled here.
struct PoolGeom {
    long long OH, OW, H, W, KH, KW, SH, SW, PT, PL, DH, DW;
};

// True if no tap start + i*d (0 <= i < k) lies in [0, size): a window wholly in the padding (possible with
// ceil_mode, or with dilation skipping over the input). ORT then emits the sentinel plane*H*W - W - 1 (its
// h_index = w_index = -1), which is stored as offset 0 and restored from the geometry alone.
__device__ __forceinline__ bool taps_empty(long long start, long long k, long long d, long long size) {
    if (start >= size) return true;
    const long long i0 = start >= 0 ? 0 : (-start + d - 1) / d;
    return i0 >= k || start + i0 * d >= size;
}

// Window offset of index tensor element e, or -1 if idx[e] is not inside its window.
__device__ __forceinline__ long long window_offset(const long long* __restrict__ idx, long long e,
                                                   const PoolGeom& g) {
    const long long ohw = g.OH * g.OW;
    const long long plane = e / ohw;
    const long long r = e - plane * ohw;
    const long long oh = r / g.OW;
    const long long ow = r - oh * g.OW;
    const long long hw = g.H * g.W;
    const long long rel = idx[e] - plane * hw;
    if (taps_empty(oh * g.SH - g.PT, g.KH, g.DH, g.H) || taps_empty(ow * g.SW - g.PL, g.KW, g.DW, g.W))
        return rel == -g.W - 1 ? 0 : -1;
    if (rel < 0 || rel >= hw) return -1;
    const long long h = rel / g.W;
    const long long w = rel - h * g.W;
    const long long dh = h - (oh * g.SH - g.PT);
    const long long dw = w - (ow * g.SW - g.PL);
    if (dh < 0 || dw < 0 || dh % g.DH != 0 || dw % g.DW != 0) return -1;
    const long long kh = dh / g.DH, kw = dw / g.DW;
    if (kh >= g.KH || kw >= g.KW) return -1;
    return kh * g.KW + kw;
}

extern "C" __global__ void maxpool_index_encode(const long long* __restrict__ idx, unsigned char* __restrict__ out,
                                                long long n, long long nbytes, long long bits,
                                                long long OH, long long OW, long long H, long long W, long long KH, long long KW,
                                                long long SH, long long SW, long long PT, long long PL, long long DH, long long DW,
                                                int* __restrict__ err) {
    const PoolGeom g = {OH, OW, H, W, KH, KW, SH, SW, PT, PL, DH, DW};
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < nbytes; b += stride) {
        const long long lo = b * 8;                 // first stream bit of this byte
        long long last = (lo + 7) / bits;           // last element touching this byte
        if (last > n - 1) last = n - 1;
        unsigned int byte = 0;
        for (long long e = lo / bits; e <= last; ++e) {
            long long k = window_offset(idx, e, g);
            if (k < 0) { *err = 1; k = 0; }         // benign race: every writer stores 1
            const long long shift = e * bits - lo;  // may be negative: element began in an earlier byte
            const unsigned long long v = (unsigned long long)k;
            byte |= (unsigned int)((shift >= 0 ? (v << shift) : (v >> -shift)) & 0xffu);
        }
        out[b] = (unsigned char)byte;
    }
}

extern "C" __global__ void maxpool_index_decode(const unsigned char* __restrict__ in, long long* __restrict__ idx,
                                                long long n, long long bits,
                                                long long OH, long long OW, long long H, long long W, long long KH, long long KW,
                                                long long SH, long long SW, long long PT, long long PL, long long DH, long long DW,
                                                int* __restrict__ err) {
    const PoolGeom g = {OH, OW, H, W, KH, KW, SH, SW, PT, PL, DH, DW};
    const long long stride = (long long)blockDim.x * gridDim.x;
    const unsigned long long mask = (bits >= 64) ? ~0ull : ((1ull << bits) - 1ull);
    const long long ohw = g.OH * g.OW;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
        const long long pos = e * bits;
        const long long first = pos >> 3;
        const int sh = (int)(pos & 7);
        const int nb = (sh + (int)bits + 7) / 8;    // bytes this element spans, all inside the buffer
        unsigned long long v = 0;
        for (int t = 0; t < nb; ++t) v |= (unsigned long long)in[first + t] << (8 * t);
        const long long k = (long long)((v >> sh) & mask);
        if (k >= g.KH * g.KW) *err = 1;
        const long long plane = e / ohw;
        const long long r = e - plane * ohw;
        const long long oh = r / g.OW;
        const long long ow = r - oh * g.OW;
        const long long h0 = oh * g.SH - g.PT, w0 = ow * g.SW - g.PL;
        if (taps_empty(h0, g.KH, g.DH, g.H) || taps_empty(w0, g.KW, g.DW, g.W)) {
            idx[e] = plane * g.H * g.W - g.W - 1;
            continue;
        }
        idx[e] = (plane * g.H + h0 + (k / g.KW) * g.DH) * g.W + w0 + (k % g.KW) * g.DW;
    }
}
