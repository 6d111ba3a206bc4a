/* wasi_probe.c: what a Hearth Wasm function gets from WASI, through
 * wasi-libc, and what it is refused. Prints one line per probe.
 *   ?exit=N     ends with exit(N) instead
 *   ?stderr=N   first writes N KiB to stderr (past the log budget is cut,
 *               the function keeps running)
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long query_number(const char *key) {
    const char *q = getenv("QUERY_STRING");
    size_t k = strlen(key);
    while (q && *q) {
        if (strncmp(q, key, k) == 0 && q[k] == '=') return atol(q + k + 1);
        q = strchr(q, '&');
        if (q) q++;
    }
    return -1;
}

static long long ns(clockid_t id) {
    struct timespec t;
    if (clock_gettime(id, &t) != 0) return -1;
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    long kib = query_number("stderr");
    for (long i = 0; i < kib; i++) {
        char line[1024];
        memset(line, 'e', sizeof line - 1);
        line[sizeof line - 1] = '\n';
        fwrite(line, 1, sizeof line, stderr);
    }
    printf("Content-Type: text/plain\n\n");
    printf("argv0=%s argc=%d\n", argc > 0 ? argv[0] : "", argc);
    printf("GREETING=%s\n", getenv("GREETING") ? getenv("GREETING") : "(unset)");

    long long wall = ns(CLOCK_REALTIME);
    printf("wall_after_2020=%d\n", wall > 1577836800LL * 1000000000LL);

    long long t0 = ns(CLOCK_MONOTONIC);
    struct timespec nap = {0, 20 * 1000 * 1000};
    int slept = nanosleep(&nap, NULL);
    long long t1 = ns(CLOCK_MONOTONIC);
    printf("nanosleep=%d slept_20ms=%d\n", slept, t1 - t0 >= 20 * 1000 * 1000);

    unsigned char a[16], b[16];
    int ea = getentropy(a, sizeof a), eb = getentropy(b, sizeof b);
    printf("entropy=%d differs=%d\n", ea == 0 && eb == 0, memcmp(a, b, sizeof a) != 0);

    errno = 0;
    FILE *f = fopen("/etc/passwd", "r");
    printf("fopen_passwd=%s errno=%s\n", f ? "opened" : "refused", strerror(errno));
    errno = 0;
    DIR *d = opendir(".");
    printf("opendir=%s\n", d ? "opened" : "refused");

    char body[64] = {0};
    size_t n = fread(body, 1, sizeof body - 1, stdin);
    printf("stdin=%zu:%s eof=%d\n", n, body, feof(stdin) != 0);

    long code = query_number("exit");
    if (code >= 0) {
        fflush(stdout);
        exit((int)code);
    }
    return 0;
}
