/* LD_PRELOAD shim for tools/pattern_block.py --measure: logs every malloc/calloc/realloc/posix_memalign/
 * aligned_alloc/memalign of at least MALLOC_LOG_MIN bytes ("M|C|R|A SIZE ADDR", A = an aligned allocation, which
 * is how ORT's CPU allocator asks) and the frees of those addresses ("F ADDR") to the file MALLOC_LOG_FILE
 * (opened O_APPEND, so the Python side can write markers into it).
 * Build: gcc -O2 -shared -fPIC -o malloc_log.so malloc_log.c */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <execinfo.h>
static int bt = -1;

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static int fd = -1, ready = 0;
static size_t min_size = 1u << 20;
static __thread int busy = 0;
#define SLOTS (1 << 20)
static uintptr_t slots[SLOTS];   /* open addressing; 1 = a tombstone. Not thread-safe: a diagnosis tool */

static void init(void) {
  if (ready) return;
  ready = 1;
  const char *p = getenv("MALLOC_LOG_FILE"), *m = getenv("MALLOC_LOG_MIN");
  if (p) fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (m) min_size = strtoull(m, 0, 10);
}
static void put(uintptr_t a) {
  size_t h = (a >> 4) & (SLOTS - 1);
  while (slots[h] && slots[h] != 1) h = (h + 1) & (SLOTS - 1);
  slots[h] = a;
}
static int take(uintptr_t a) {
  for (size_t h = (a >> 4) & (SLOTS - 1); slots[h]; h = (h + 1) & (SLOTS - 1))
    if (slots[h] == a) { slots[h] = 1; return 1; }
  return 0;
}
static void log_alloc(const char *kind, size_t n, void *p) {
  if (fd < 0 || busy || !p || n < min_size) return;
  busy = 1;
  char b[96];
  int l = snprintf(b, sizeof b, "%s %zu %p\n", kind, n, p);
  if (write(fd, b, l) < 0) {}
  if (bt < 0) bt = getenv("MALLOC_LOG_BT") != 0;
  if (bt) { void *f[12]; int k = backtrace(f, 12); backtrace_symbols_fd(f, k, fd); }
  put((uintptr_t)p);
  busy = 0;
}
static void log_free(void *p) {
  if (fd < 0 || busy || !p || !take((uintptr_t)p)) return;
  char b[64];
  int l = snprintf(b, sizeof b, "F %p\n", p);
  if (write(fd, b, l) < 0) {}
}
void *malloc(size_t n) { init(); void *p = __libc_malloc(n); log_alloc("M", n, p); return p; }
void *calloc(size_t a, size_t b) { init(); void *p = __libc_calloc(a, b); log_alloc("C", a * b, p); return p; }
void *realloc(void *q, size_t n) { init(); log_free(q); void *p = __libc_realloc(q, n); log_alloc("R", n, p); return p; }
int posix_memalign(void **r, size_t al, size_t n) {
  init(); void *p = __libc_memalign(al, n); if (!p) return 12; *r = p; log_alloc("A", n, p); return 0;
}
void *aligned_alloc(size_t al, size_t n) { init(); void *p = __libc_memalign(al, n); log_alloc("A", n, p); return p; }
void *memalign(size_t al, size_t n) { init(); void *p = __libc_memalign(al, n); log_alloc("A", n, p); return p; }
void free(void *p) { log_free(p); __libc_free(p); }
