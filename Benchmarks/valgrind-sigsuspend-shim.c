/*
 * Lets valgrind run a Swift program that has an async main on Linux.
 *
 * There, the main thread ends in libdispatch's signal thread, which calls sigsuspend(2) with a
 * mask in read-only memory; valgrind writes to the mask it is given while it handles the call,
 * and dies of the fault. This wrapper hands sigsuspend a writable copy of the same mask.
 * Loaded with LD_PRELOAD by Benchmarks/profile.sh; never linked into Courier.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>

int sigsuspend(const sigset_t *mask) {
    static int (*real)(const sigset_t *);
    sigset_t copy = *mask;
    if (!real) real = (int (*)(const sigset_t *))dlsym(RTLD_NEXT, "sigsuspend");
    return real(&copy);
}
