/* echo_headers.c: answers with the request's method, path, query, a header
 * and the body, as JSON-ish text. */
#include <stdio.h>
#include <stdlib.h>

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v ? v : "";
}

int main(void) {
    printf("Content-Type: text/plain\n\n");
    printf("method=%s\npath=%s\nquery=%s\nx-demo=%s\nbody=",
           env("REQUEST_METHOD"), env("PATH_INFO"), env("QUERY_STRING"), env("HTTP_X_DEMO"));
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) fwrite(buf, 1, n, stdout);
    printf("\n");
    return 0;
}
