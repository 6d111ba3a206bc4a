/* kv_counter.c: counts invocations in KV, one counter per request path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hearth.h"

int main(void) {
    const char *key = getenv("PATH_INFO");
    if (!key) key = "/";
    char buf[32] = {0};
    size_t len = 0;
    long count = 0;
    int32_t rc = hearth_kv_get(key, strlen(key), buf, sizeof buf - 1, &len);
    if (rc == 0 && len < sizeof buf) count = strtol(buf, NULL, 10);
    else if (rc < 0) { fprintf(stderr, "kv_get failed: %d\n", rc); return 1; }
    count++;
    int n = snprintf(buf, sizeof buf, "%ld", count);
    if (hearth_kv_set(key, strlen(key), buf, (size_t)n) != 0) return 1;
    char msg[64];
    int m = snprintf(msg, sizeof msg, "count for %s is %ld", key, count);
    hearth_log(HEARTH_INFO, msg, (size_t)m);
    printf("Content-Type: text/plain\n\n%ld\n", count);
    return 0;
}
