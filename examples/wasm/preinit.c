/* preinit.c: a function whose set-up is worth snapshotting. It answers how
 * many primes there are up to n (?n=..., default 1000000) from a sieve of
 * the numbers up to SIEVE_MAX. The init step builds the sieve; Hearth runs
 * it once at deploy and stores the initialized module (Wizer; see
 * crates/hearth-wasm/src/snapshot.rs), so invocations start with the sieve
 * built. Compiled with -DNO_INIT the export is missing and every invocation
 * builds the sieve itself: bench/snapshot.sh measures the difference.
 *   clang --target=wasm32-wasi -O2 -o preinit.wasm examples/wasm/preinit.c */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIEVE_MAX 4000000
#define BLOCK 4096

static unsigned char composite[SIEVE_MAX / 8 + 1]; /* one bit per number */
static unsigned primes_before[SIEVE_MAX / BLOCK + 2]; /* primes below k*BLOCK */
static int ready;

static int is_composite(unsigned i) { return composite[i >> 3] >> (i & 7) & 1; }

static void build(void) {
  composite[0] |= 3; /* 0 and 1 */
  for (unsigned i = 2; (unsigned long)i * i <= SIEVE_MAX; i++)
    if (!is_composite(i))
      for (unsigned j = i * i; j <= SIEVE_MAX; j += i) composite[j >> 3] |= 1 << (j & 7);
  unsigned count = 0;
  for (unsigned i = 0; i <= SIEVE_MAX; i++) {
    if (i % BLOCK == 0) primes_before[i / BLOCK] = count;
    count += !is_composite(i);
  }
  ready = 1;
}

#ifndef NO_INIT
__attribute__((export_name("wizer-initialize"))) void init(void) { build(); }
#endif

int main(void) {
  if (!ready) build();
  const char *q = getenv("QUERY_STRING");
  long n = 1000000;
  if (q && strncmp(q, "n=", 2) == 0) n = strtol(q + 2, NULL, 10);
  if (n < 0 || n > SIEVE_MAX) {
    printf("Status: 400 Bad Request\nContent-Type: text/plain\n\nn must be 0..%d\n", SIEVE_MAX);
    return 0;
  }
  unsigned count = primes_before[n / BLOCK];
  for (long i = n / BLOCK * BLOCK; i <= n; i++) count += !is_composite((unsigned)i);
  printf("Content-Type: text/plain\n\n%u primes up to %ld\n", count, n);
  return 0;
}
