// A wasi:http function with an init step: `wizer-initialize` builds a
// table of the primes below 2,000,000 (a sieve, tens of milliseconds),
// which Hearth runs once at deploy and snapshots, so a request only reads
// the table. Built by build.sh with WORLD=function-with-init. The tests
// build it with -DTRAP_AT_INIT or -DRANDOM_AT_INIT too, to be refused;
// bench/components.sh with -DNO_INIT_STEP for WORLD=function, the same
// function without an init step, which builds the table per request.
//
//   /            "primes=148933 initialized=1"
#include <stdio.h>
#include <string.h>

#ifdef NO_INIT_STEP
#include "function.h"
typedef function_list_u8_t list_u8_t;
#else
#include "function_with_init.h"
typedef function_with_init_list_u8_t list_u8_t;
#endif

#define LIMIT 2000000
static unsigned char composite[LIMIT];
static int count;
static int initialized;

static void build_table(void) {
  for (int i = 2; (long)i * i < LIMIT; i++)
    if (!composite[i])
      for (int j = i * i; j < LIMIT; j += i) composite[j] = 1;
  count = 0;
  for (int i = 2; i < LIMIT; i++) count += !composite[i];
}

#ifndef NO_INIT_STEP
void exports_function_with_init_wizer_initialize(void) {
#ifdef TRAP_AT_INIT
  fprintf(stderr, "cannot build the table\n");
  __builtin_trap();
#endif
#ifdef RANDOM_AT_INIT
  list_u8_t seed;
  wasi_random_random_get_random_bytes(8, &seed);
#endif
  build_table();
  initialized++;
}
#endif

void exports_wasi_http_incoming_handler_handle(
    exports_wasi_http_incoming_handler_own_incoming_request_t request,
    exports_wasi_http_incoming_handler_own_response_outparam_t response_out) {
  wasi_http_types_incoming_request_drop_own(request);
  // Without a snapshot (the init step never ran), build it per request.
  if (!initialized) build_table();
  char text[64];
  int n = snprintf(text, sizeof text, "primes=%d initialized=%d\n", count, initialized);

  wasi_http_types_own_outgoing_response_t response =
      wasi_http_types_constructor_outgoing_response(wasi_http_types_constructor_fields());
  wasi_http_types_own_outgoing_body_t body;
  wasi_http_types_method_outgoing_response_body(
      wasi_http_types_borrow_outgoing_response(response), &body);
  wasi_http_types_result_own_outgoing_response_error_code_t result = {
      .is_err = false, .val = {.ok = response}};
  wasi_http_types_static_response_outparam_set(response_out, &result);
  wasi_http_types_own_output_stream_t stream;
  wasi_http_types_method_outgoing_body_write(wasi_http_types_borrow_outgoing_body(body), &stream);
  list_u8_t bytes = {(uint8_t *)text, (size_t)n};
  wasi_io_streams_stream_error_t err;
  wasi_io_streams_method_output_stream_blocking_write_and_flush(
      wasi_io_streams_borrow_output_stream(stream), &bytes, &err);
  wasi_io_streams_output_stream_drop_own(stream);
  wasi_http_types_static_outgoing_body_finish(body, NULL, NULL);
}
