/* A native thread that polls /proc/self/statm while the GIL is held by ORT; at each new RSS maximum it records
 * mallinfo2 (heap arenas' size, in use, free; mmapped bytes). Diagnosis only. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static volatile int running = 0, quit = 0;
static long maxrss = 0;
static struct mallinfo2 at;
static pthread_t th;
static long rss(void) {
  char b[128]; int fd = open("/proc/self/statm", O_RDONLY); int n = read(fd, b, sizeof b - 1); close(fd);
  if (n <= 0) return 0; b[n] = 0; long a, r; sscanf(b, "%ld %ld", &a, &r); return r * 4096;
}
static void *loop(void *x) {
  struct timespec ts = {0, 200000};
  while (!quit) {
    if (running) { long r = rss(); if (r > maxrss) { maxrss = r; at = mallinfo2(); } }
    nanosleep(&ts, 0);
  }
  return 0;
}
void sampler_init(void) { pthread_create(&th, 0, loop, 0); }
void sampler_start(void) { maxrss = rss(); memset(&at, 0, sizeof at); running = 1; }
long sampler_stop(size_t *out) { running = 0; usleep(1000);
  out[0] = at.arena; out[1] = at.hblkhd; out[2] = at.uordblks; out[3] = at.fordblks; out[4] = at.keepcost; return maxrss; }
