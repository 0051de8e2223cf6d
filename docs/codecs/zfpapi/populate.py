import ctypes, resource, os, numpy as np, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = 4096; MADV_POPULATE_WRITE = 23; MADV_HUGEPAGE = 14
def populate(a):
    p = a.ctypes.data; s = (p + PAGE - 1) & ~(PAGE - 1); e = (p + a.nbytes) & ~(PAGE - 1)
    if e > s:
        r = libc.madvise(s, e - s, MADV_POPULATE_WRITE)
        if r: raise OSError(ctypes.get_errno(), "madvise")
def huge(a):
    H = 2 << 20; p = a.ctypes.data; s = (p + H - 1) & ~(H - 1); e = (p + a.nbytes) & ~(H - 1)
    if e > s: libc.madvise(s, e - s, MADV_HUGEPAGE)
N = 200
for nbytes in (2 << 20, 4 << 20, 8 << 20):
    n = nbytes // 4
    for name in ("plain", "populate", "huge", "huge+populate"):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(N):
            a = np.empty(n, np.uint32)
            if "huge" in name: huge(a)
            if "populate" in name: populate(a)
            a[::1024] = 1  # touch every page
            del a
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        print(f"{nbytes>>20} MiB {name:14s} user {(r1.ru_utime-r0.ru_utime)/N*1e3:.3f} ms sys {(r1.ru_stime-r0.ru_stime)/N*1e3:.3f} ms faults {(r1.ru_minflt-r0.ru_minflt)/N:.0f}")
print("aligned")
def aligned(nbytes):
    H = 2 << 20
    raw = np.empty(nbytes + H, np.uint8); p = raw.ctypes.data; s = (p + H - 1) & ~(H - 1)
    a = raw[s - p:s - p + nbytes]
    full = nbytes & ~(H - 1)
    if full: libc.madvise(s, full, MADV_HUGEPAGE)
    return a
for nbytes in (2 << 20, 4 << 20, 8 << 20):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(N):
        a = aligned(nbytes); a[::4096] = 1; del a
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{nbytes>>20} MiB aligned-huge user {(r1.ru_utime-r0.ru_utime)/N*1e3:.3f} ms sys {(r1.ru_stime-r0.ru_stime)/N*1e3:.3f} ms faults {(r1.ru_minflt-r0.ru_minflt)/N:.0f}")
