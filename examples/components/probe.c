// A wasi:http/proxy function with one route per behaviour Hearth's tests
// and benchmarks need. Built by examples/components/build.sh.
//
//   /fetch?URL     GETs URL through wasi:http/outgoing-handler
//   /config?KEY    reads KEY from wasi:config/store
//   /env?NAME      reads NAME from the environment (wasi:cli)
//   /random        16 random bytes and the wall clock (wasi:random, clocks)
//   /log           writes to stdout, stderr and wasi:logging
//   /kv?KEY        increments counter KEY in wasi:keyvalue, records it as
//                  "last", answers "KEY=N last=KEY"
//   /kvstore?NAME  opens the wasi:keyvalue store NAME
//   /kvexists?KEY  "yes" or "no": whether KEY holds a value
//   /kvkeys        lists the default bucket: "N keys", then "; more: ERROR"
//                  if the page came with a cursor and the next one failed
//   /big?N         answers N bytes
//   /spin          loops forever
//   /bomb          allocates until memory runs out
//   /trap          traps
//   /fields        creates header fields until the host says no
//   anything else  200 "probe\n"
#include <stdio.h>
#include <stdlib.h>
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

typedef struct {
  wasi_http_types_own_outgoing_body_t body;
  wasi_http_types_own_output_stream_t stream;
} reply;

static reply start(exports_wasi_http_incoming_handler_own_response_outparam_t out,
                   uint16_t status, const char *content_type) {
  wasi_http_types_own_fields_t headers = wasi_http_types_constructor_fields();
  if (content_type) {
    wasi_http_types_field_name_t name = {(uint8_t *)"content-type", 12};
    wasi_http_types_field_value_t value = {(uint8_t *)content_type, strlen(content_type)};
    wasi_http_types_header_error_t err;
    wasi_http_types_method_fields_append(wasi_http_types_borrow_fields(headers), &name,
                                         &value, &err);
  }
  wasi_http_types_own_outgoing_response_t response =
      wasi_http_types_constructor_outgoing_response(headers);
  wasi_http_types_method_outgoing_response_set_status_code(
      wasi_http_types_borrow_outgoing_response(response), status);
  reply r;
  wasi_http_types_method_outgoing_response_body(
      wasi_http_types_borrow_outgoing_response(response), &r.body);
  wasi_http_types_result_own_outgoing_response_error_code_t result = {
      .is_err = false, .val = {.ok = response}};
  wasi_http_types_static_response_outparam_set(out, &result);
  wasi_http_types_method_outgoing_body_write(wasi_http_types_borrow_outgoing_body(r.body),
                                             &r.stream);
  return r;
}

static void finish(reply *r) {
  wasi_io_streams_stream_error_t err;
  wasi_io_streams_method_output_stream_blocking_flush(
      wasi_io_streams_borrow_output_stream(r->stream), &err);
  wasi_io_streams_output_stream_drop_own(r->stream);
  wasi_http_types_static_outgoing_body_finish(r->body, NULL, NULL);
}

static void respond(exports_wasi_http_incoming_handler_own_response_outparam_t out,
                    uint16_t status, const char *text) {
  reply r = start(out, status, "text/plain");
  write_all(wasi_io_streams_borrow_output_stream(r.stream), (const uint8_t *)text,
            strlen(text));
  finish(&r);
}

// Reads a whole body into a malloc'd, NUL-terminated buffer.
static char *read_body(wasi_http_types_own_incoming_body_t body, size_t *len) {
  wasi_http_types_own_input_stream_t in;
  wasi_http_types_method_incoming_body_stream(wasi_http_types_borrow_incoming_body(body), &in);
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    function_list_u8_t chunk;
    wasi_io_streams_stream_error_t err;
    if (!wasi_io_streams_method_input_stream_blocking_read(
            wasi_io_streams_borrow_input_stream(in), 65536, &chunk, &err))
      break;
    while (n + chunk.len + 1 > cap) buf = realloc(buf, cap *= 2);
    memcpy(buf + n, chunk.ptr, chunk.len);
    n += chunk.len;
    function_list_u8_free(&chunk);
  }
  buf[n] = 0;
  *len = n;
  wasi_io_streams_input_stream_drop_own(in);
  wasi_http_types_future_trailers_drop_own(wasi_http_types_static_incoming_body_finish(body));
  return buf;
}

static void fetch(const char *url, exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  wasi_http_types_scheme_t scheme = {.tag = WASI_HTTP_TYPES_SCHEME_HTTP};
  if (strncmp(url, "https://", 8) == 0) {
    scheme.tag = WASI_HTTP_TYPES_SCHEME_HTTPS;
    url += 8;
  } else if (strncmp(url, "http://", 7) == 0) {
    url += 7;
  }
  const char *slash = strchr(url, '/');
  size_t host_len = slash ? (size_t)(slash - url) : strlen(url);
  wasi_http_types_own_outgoing_request_t req =
      wasi_http_types_constructor_outgoing_request(wasi_http_types_constructor_fields());
  wasi_http_types_borrow_outgoing_request_t b = wasi_http_types_borrow_outgoing_request(req);
  function_string_t authority = {(uint8_t *)url, host_len};
  function_string_t path = {(uint8_t *)(slash ? slash : "/"), slash ? strlen(slash) : 1};
  wasi_http_types_method_outgoing_request_set_scheme(b, &scheme);
  wasi_http_types_method_outgoing_request_set_authority(b, &authority);
  wasi_http_types_method_outgoing_request_set_path_with_query(b, &path);

  wasi_http_outgoing_handler_own_future_incoming_response_t future;
  wasi_http_outgoing_handler_error_code_t code;
  char text[256];
  if (!wasi_http_outgoing_handler_handle(req, NULL, &future, &code)) {
    snprintf(text, sizeof text, "refused: error code %d\n", code.tag);
    respond(out, 502, text);
    return;
  }
  wasi_http_types_own_pollable_t ready = wasi_http_types_method_future_incoming_response_subscribe(
      wasi_http_types_borrow_future_incoming_response(future));
  wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(ready));
  wasi_io_poll_pollable_drop_own(ready);
  wasi_http_types_result_result_own_incoming_response_error_code_void_t got;
  wasi_http_types_method_future_incoming_response_get(
      wasi_http_types_borrow_future_incoming_response(future), &got);
  wasi_http_types_future_incoming_response_drop_own(future);
  if (got.is_err || got.val.ok.is_err) {
    snprintf(text, sizeof text, "failed: error code %d\n", got.is_err ? -1 : got.val.ok.val.err.tag);
    respond(out, 502, text);
    return;
  }
  wasi_http_types_own_incoming_response_t response = got.val.ok.val.ok;
  uint16_t status = wasi_http_types_method_incoming_response_status(
      wasi_http_types_borrow_incoming_response(response));
  wasi_http_types_own_incoming_body_t body;
  wasi_http_types_method_incoming_response_consume(
      wasi_http_types_borrow_incoming_response(response), &body);
  size_t len;
  char *data = read_body(body, &len);
  wasi_http_types_incoming_response_drop_own(response);
  reply r = start(out, 200, "text/plain");
  int n = snprintf(text, sizeof text, "upstream %d: ", status);
  write_all(wasi_io_streams_borrow_output_stream(r.stream), (uint8_t *)text, n);
  write_all(wasi_io_streams_borrow_output_stream(r.stream), (uint8_t *)data, len);
  free(data);
  finish(&r);
}

static void config(const char *key, exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  function_string_t k = {(uint8_t *)key, strlen(key)};
  function_option_string_t value;
  wasi_config_store_error_t err;
  if (!wasi_config_store_get(&k, &value, &err)) {
    respond(out, 500, "config error\n");
  } else if (!value.is_some) {
    respond(out, 404, "no such key\n");
  } else {
    char *text = strndup((const char *)value.val.ptr, value.val.len);
    respond(out, 200, text);
    free(text);
    function_string_free(&value.val);
  }
}

// Opens the default bucket; if it cannot, answers 500 and returns false.
static bool open_default(wasi_keyvalue_store_own_bucket_t *bucket,
                         exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  function_string_t store = {(uint8_t *)"default", 7};
  wasi_keyvalue_store_error_t err;
  if (wasi_keyvalue_store_open(&store, bucket, &err)) return true;
  respond(out, 500, "open failed\n");
  return false;
}

static void kv(const char *key, exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  wasi_keyvalue_store_own_bucket_t bucket;
  wasi_keyvalue_store_error_t err;
  if (!open_default(&bucket, out)) return;
  wasi_keyvalue_store_borrow_bucket_t b = wasi_keyvalue_store_borrow_bucket(bucket);
  function_string_t k = {(uint8_t *)key, strlen(key)};
  uint64_t n;
  char text[512];
  if (!wasi_keyvalue_atomics_increment(b, &k, 1, &n, &err)) {
    snprintf(text, sizeof text, "increment failed: %.*s\n",
             err.tag == WASI_KEYVALUE_STORE_ERROR_OTHER ? (int)err.val.other.len : 0,
             err.tag == WASI_KEYVALUE_STORE_ERROR_OTHER ? (char *)err.val.other.ptr : "");
    wasi_keyvalue_store_bucket_drop_own(bucket);
    respond(out, 500, text);
    return;
  }
  function_string_t last = {(uint8_t *)"last", 4};
  function_list_u8_t value = {(uint8_t *)key, strlen(key)};
  wasi_keyvalue_store_method_bucket_set(b, &last, &value, &err);
  function_option_list_u8_t got;
  wasi_keyvalue_store_method_bucket_get(b, &last, &got, &err);
  snprintf(text, sizeof text, "%s=%llu last=%.*s\n", key, (unsigned long long)n,
           got.is_some ? (int)got.val.len : 0, got.is_some ? (char *)got.val.ptr : "");
  wasi_keyvalue_store_bucket_drop_own(bucket);
  respond(out, 200, text);
}

static void kv_exists(const char *key, exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  wasi_keyvalue_store_own_bucket_t bucket;
  wasi_keyvalue_store_error_t err;
  if (!open_default(&bucket, out)) return;
  function_string_t k = {(uint8_t *)key, strlen(key)};
  bool exists = false;
  bool ok = wasi_keyvalue_store_method_bucket_exists(wasi_keyvalue_store_borrow_bucket(bucket), &k,
                                                     &exists, &err);
  wasi_keyvalue_store_bucket_drop_own(bucket);
  respond(out, ok ? 200 : 500, !ok ? "exists failed\n" : exists ? "yes" : "no");
}

static void kv_keys(exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  wasi_keyvalue_store_own_bucket_t bucket;
  wasi_keyvalue_store_error_t err;
  if (!open_default(&bucket, out)) return;
  wasi_keyvalue_store_borrow_bucket_t b = wasi_keyvalue_store_borrow_bucket(bucket);
  wasi_keyvalue_store_key_response_t page;
  char text[1024];
  if (!wasi_keyvalue_store_method_bucket_list_keys(b, NULL, &page, &err)) {
    wasi_keyvalue_store_bucket_drop_own(bucket);
    respond(out, 500, "list failed\n");
    return;
  }
  int n = snprintf(text, sizeof text, "%zu keys", page.keys.len);
  if (page.cursor.is_some) {
    wasi_keyvalue_store_key_response_t next;
    uint64_t cursor = page.cursor.val;
    if (wasi_keyvalue_store_method_bucket_list_keys(b, &cursor, &next, &err)) {
      snprintf(text + n, sizeof text - n, "; more: %zu keys", next.keys.len);
      wasi_keyvalue_store_key_response_free(&next);
    } else {
      snprintf(text + n, sizeof text - n, "; more: %.*s",
               err.tag == WASI_KEYVALUE_STORE_ERROR_OTHER ? (int)err.val.other.len : 0,
               err.tag == WASI_KEYVALUE_STORE_ERROR_OTHER ? (char *)err.val.other.ptr : "");
    }
  }
  wasi_keyvalue_store_key_response_free(&page);
  wasi_keyvalue_store_bucket_drop_own(bucket);
  respond(out, 200, text);
}

static void kv_store(const char *name, exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  function_string_t store = {(uint8_t *)name, strlen(name)};
  wasi_keyvalue_store_own_bucket_t bucket;
  wasi_keyvalue_store_error_t err;
  if (wasi_keyvalue_store_open(&store, &bucket, &err)) {
    wasi_keyvalue_store_bucket_drop_own(bucket);
    respond(out, 200, "opened\n");
  } else {
    respond(out, 404, err.tag == WASI_KEYVALUE_STORE_ERROR_NO_SUCH_STORE ? "no such store\n"
                                                                          : "error\n");
  }
}

static void random_and_time(exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  function_list_u8_t bytes;
  wasi_random_random_get_random_bytes(16, &bytes);
  wasi_clocks_wall_clock_datetime_t now;
  wasi_clocks_wall_clock_now(&now);
  char text[128];
  int n = 0;
  for (size_t i = 0; i < bytes.len; i++) n += snprintf(text + n, sizeof text - n, "%02x", bytes.ptr[i]);
  snprintf(text + n, sizeof text - n, " %llu.%09u\n", (unsigned long long)now.seconds,
           now.nanoseconds);
  function_list_u8_free(&bytes);
  respond(out, 200, text);
}

static void big(size_t n, exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  static uint8_t block[65536];
  memset(block, 'x', sizeof block);
  reply r = start(out, 200, "application/octet-stream");
  while (n > 0) {
    size_t k = n < sizeof block ? n : sizeof block;
    write_all(wasi_io_streams_borrow_output_stream(r.stream), block, k);
    n -= k;
  }
  finish(&r);
}

void exports_wasi_http_incoming_handler_handle(
    exports_wasi_http_incoming_handler_own_incoming_request_t request,
    exports_wasi_http_incoming_handler_own_response_outparam_t out) {
  wasi_http_types_borrow_incoming_request_t req = wasi_http_types_borrow_incoming_request(request);
  function_string_t pq = {0};
  wasi_http_types_method_incoming_request_path_with_query(req, &pq);
  char *path = strndup((const char *)pq.ptr, pq.len);
  function_string_free(&pq);
  char *query = strchr(path, '?');
  if (query) *query++ = 0;
  else query = "";

  if (!strcmp(path, "/fetch")) {
    fetch(query, out);
  } else if (!strcmp(path, "/config")) {
    config(query, out);
  } else if (!strcmp(path, "/env")) {
    const char *v = getenv(query);
    respond(out, v ? 200 : 404, v ? v : "unset\n");
  } else if (!strcmp(path, "/kv")) {
    kv(query, out);
  } else if (!strcmp(path, "/kvstore")) {
    kv_store(query, out);
  } else if (!strcmp(path, "/kvkeys")) {
    kv_keys(out);
  } else if (!strcmp(path, "/kvexists")) {
    kv_exists(query, out);
  } else if (!strcmp(path, "/random")) {
    random_and_time(out);
  } else if (!strcmp(path, "/log")) {
    printf("to stdout\n");
    fprintf(stderr, "to stderr\n");
    fflush(stdout);
    function_string_t context = {(uint8_t *)"probe", 5};
    function_string_t message = {(uint8_t *)"via wasi:logging", 16};
    wasi_logging_logging_log(WASI_LOGGING_LOGGING_LEVEL_WARN, &context, &message);
    respond(out, 200, "logged\n");
  } else if (!strcmp(path, "/big")) {
    big(strtoull(query, NULL, 10), out);
  } else if (!strcmp(path, "/spin")) {
    for (volatile unsigned i = 0;; i++) {
    }
  } else if (!strcmp(path, "/bomb")) {
    // Each block is kept (a list the optimizer cannot see through), so
    // the allocations are real.
    static void *volatile kept;
    for (;;) {
      void **p = malloc(1 << 20);
      if (!p) {
        fprintf(stderr, "malloc failed\n");
        abort();
      }
      memset(p, 1, 1 << 20);
      *p = kept;
      kept = p;
    }
  } else if (!strcmp(path, "/trap")) {
    __builtin_trap();
  } else if (!strcmp(path, "/fields")) {
    for (;;) wasi_http_types_constructor_fields();
  } else {
    respond(out, 200, "probe\n");
  }
  free(path);
  wasi_http_types_incoming_request_drop_own(request);
}
