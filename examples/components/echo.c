// A wasi:http/proxy echo: streams the request body back as it reads it,
// 64 KiB at a time. Imports only the
// proxy world, so `wasmtime serve` runs it as Hearth does (bench/
// components.sh compares the two). Built by build.sh.
#include <string.h>

#include "function.h"

typedef wasi_io_streams_borrow_output_stream_t out_stream;

// Writes all of p[0..n], waiting for the host to take each part.
static void write_all(out_stream s, const uint8_t *p, size_t n) {
  while (n > 0) {
    uint64_t permit;
    wasi_io_streams_stream_error_t err;
    if (!wasi_io_streams_method_output_stream_check_write(s, &permit, &err)) return;
    if (permit == 0) {
      wasi_io_streams_own_pollable_t ready = wasi_io_streams_method_output_stream_subscribe(s);
      wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(ready));
      wasi_io_poll_pollable_drop_own(ready);
      continue;
    }
    size_t k = n < permit ? n : (size_t)permit;
    function_list_u8_t part = {(uint8_t *)p, k};
    if (!wasi_io_streams_method_output_stream_write(s, &part, &err)) return;
    p += k;
    n -= k;
  }
}

void exports_wasi_http_incoming_handler_handle(
    exports_wasi_http_incoming_handler_own_incoming_request_t request,
    exports_wasi_http_incoming_handler_own_response_outparam_t response_out) {
  wasi_http_types_borrow_incoming_request_t req = wasi_http_types_borrow_incoming_request(request);
  wasi_http_types_own_incoming_body_t body_in;
  wasi_http_types_method_incoming_request_consume(req, &body_in);
  wasi_http_types_own_input_stream_t in;
  wasi_http_types_method_incoming_body_stream(wasi_http_types_borrow_incoming_body(body_in), &in);

  wasi_http_types_own_fields_t headers = wasi_http_types_constructor_fields();
  wasi_http_types_field_name_t name = {(uint8_t *)"content-type", 12};
  wasi_http_types_field_value_t value = {(uint8_t *)"application/octet-stream", 24};
  wasi_http_types_header_error_t header_err;
  wasi_http_types_method_fields_append(wasi_http_types_borrow_fields(headers), &name, &value,
                                       &header_err);
  wasi_http_types_own_outgoing_response_t response =
      wasi_http_types_constructor_outgoing_response(headers);
  wasi_http_types_own_outgoing_body_t body_out;
  wasi_http_types_method_outgoing_response_body(
      wasi_http_types_borrow_outgoing_response(response), &body_out);
  wasi_http_types_result_own_outgoing_response_error_code_t result = {
      .is_err = false, .val = {.ok = response}};
  wasi_http_types_static_response_outparam_set(response_out, &result);
  wasi_http_types_own_output_stream_t out;
  wasi_http_types_method_outgoing_body_write(wasi_http_types_borrow_outgoing_body(body_out), &out);

  for (;;) {
    function_list_u8_t chunk;
    wasi_io_streams_stream_error_t err;
    if (!wasi_io_streams_method_input_stream_blocking_read(
            wasi_io_streams_borrow_input_stream(in), 65536, &chunk, &err))
      break;
    write_all(wasi_io_streams_borrow_output_stream(out), chunk.ptr, chunk.len);
    function_list_u8_free(&chunk);
  }
  wasi_io_streams_stream_error_t err;
  wasi_io_streams_method_output_stream_blocking_flush(wasi_io_streams_borrow_output_stream(out),
                                                      &err);
  wasi_io_streams_output_stream_drop_own(out);
  wasi_http_types_static_outgoing_body_finish(body_out, NULL, NULL);
  wasi_io_streams_input_stream_drop_own(in);
  wasi_http_types_future_trailers_drop_own(wasi_http_types_static_incoming_body_finish(body_in));
  wasi_http_types_incoming_request_drop_own(request);
}
