// Work after the response in a wasi:http/proxy function: it answers
// "answered\n", finishes its body, and only then works: 1.5 s later it
// writes "component" at key "after" in wasi:keyvalue (the function's KV).
// The caller has its whole answer as soon as the body is finished.
// Built by examples/components/build.sh.
#include <string.h>

#include "function.h"

void exports_wasi_http_incoming_handler_handle(
    exports_wasi_http_incoming_handler_own_incoming_request_t request,
    exports_wasi_http_incoming_handler_own_response_outparam_t response_out) {
  wasi_http_types_incoming_request_drop_own(request);

  wasi_http_types_own_outgoing_response_t response =
      wasi_http_types_constructor_outgoing_response(
          wasi_http_types_constructor_fields());
  wasi_http_types_own_outgoing_body_t body;
  wasi_http_types_method_outgoing_response_body(
      wasi_http_types_borrow_outgoing_response(response), &body);
  wasi_http_types_result_own_outgoing_response_error_code_t result = {
      .is_err = false, .val = {.ok = response}};
  wasi_http_types_static_response_outparam_set(response_out, &result);

  wasi_http_types_own_output_stream_t stream;
  wasi_http_types_method_outgoing_body_write(
      wasi_http_types_borrow_outgoing_body(body), &stream);
  const char *text = "answered\n";
  function_list_u8_t bytes = {(uint8_t *)text, strlen(text)};
  wasi_io_streams_stream_error_t err;
  wasi_io_streams_method_output_stream_blocking_write_and_flush(
      wasi_io_streams_borrow_output_stream(stream), &bytes, &err);
  wasi_io_streams_output_stream_drop_own(stream);
  wasi_http_types_static_outgoing_body_finish(body, NULL, NULL);

  // The response is whole: what follows is work after it.
  wasi_clocks_monotonic_clock_own_pollable_t later =
      wasi_clocks_monotonic_clock_subscribe_duration(1500ull * 1000 * 1000);
  wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(later));
  wasi_io_poll_pollable_drop_own(later);

  function_string_t store = {(uint8_t *)"default", 7};
  wasi_keyvalue_store_own_bucket_t bucket;
  wasi_keyvalue_store_error_t kv_err;
  if (!wasi_keyvalue_store_open(&store, &bucket, &kv_err)) return;
  function_string_t key = {(uint8_t *)"after", 5};
  function_list_u8_t value = {(uint8_t *)"component", 9};
  wasi_keyvalue_store_method_bucket_set(
      wasi_keyvalue_store_borrow_bucket(bucket), &key, &value, &kv_err);
  wasi_keyvalue_store_bucket_drop_own(bucket);
}
