/* snapshot.c: everything a tape has to hold in one function. It reads the
 * clock, draws random bytes, counts its calls in KV and fetches the URL in
 * the request body, then answers with all of it. A replay of a recorded
 * call must answer the same bytes without touching KV or the network.
 * Build a second version with -DGREETING='"v2"' to see replay report it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "hearth.h"

#ifndef GREETING
#define GREETING "v1"
#endif

static char url[2048];
static char up[4096];

int main(void) {
    size_t n = fread(url, 1, sizeof url - 1, stdin);
    while (n > 0 && (url[n - 1] == '\n' || url[n - 1] == '\r')) n--;

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned char rnd[8];
    if (getentropy(rnd, sizeof rnd) != 0) return 1;

    char buf[32] = {0};
    size_t len = 0;
    long count = 0;
    if (hearth_kv_get("n", 1, buf, sizeof buf - 1, &len) == 0 && len < sizeof buf)
        count = strtol(buf, NULL, 10);
    count++;
    int m = snprintf(buf, sizeof buf, "%ld", count);
    if (hearth_kv_set("n", 1, buf, (size_t)m) != 0) return 1;

    size_t up_len = 0;
    int32_t status = hearth_http_fetch("GET", 3, url, n, "", 0, "", 0, up, sizeof up - 1, &up_len);
    if (status < 0) up_len = 0;
    if (up_len >= sizeof up) up_len = sizeof up - 1;
    up[up_len] = 0;

    printf("Content-Type: text/plain\n\n%s n=%ld t=%lld.%09ld r=", GREETING, count,
           (long long)now.tv_sec, now.tv_nsec);
    for (size_t i = 0; i < sizeof rnd; i++) printf("%02x", rnd[i]);
    printf(" up=%d:%s\n", status, up);
    return 0;
}
