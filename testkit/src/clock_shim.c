/* A wall clock offset for one test server: loaded with LD_PRELOAD, it adds
 * KEYHOLDER_CLOCK_OFFSET_MS milliseconds to every reading of the real-time
 * clock (clock_gettime of CLOCK_REALTIME, gettimeofday, time), so the
 * server's TIME is really that far off. The monotonic clocks are left
 * alone. It reads the kernel's clock with the system call itself, not
 * through the C library it replaces, so that no lookup of the next
 * definition (which may allocate, and an allocator may read the clock) can
 * recurse into it. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
    const char *ms = getenv("KEYHOLDER_CLOCK_OFFSET_MS");
    return ms ? atoll(ms) * 1000000LL : 0;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, clock, ts);
    if (r == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
        ts->tv_sec = ns / 1000000000LL;
        ts->tv_nsec = ns % 1000000000LL;
    }
    return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return -1;
    }
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (t) {
        *t = ts.tv_sec;
    }
    return ts.tv_sec;
}
