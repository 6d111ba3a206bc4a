/* hearth.h: host calls for Hearth Wasm functions (WASI preview 1 commands).
 *
 * Build:  clang --target=wasm32-wasi -O2 -o fn.wasm fn.c
 *
 * The guest contract: the request body is stdin; method, path, query and
 * headers are CGI environment variables (REQUEST_METHOD, PATH_INFO,
 * QUERY_STRING, CONTENT_TYPE, HTTP_<NAME>); stdout is the response,
 * optionally opened by a header block ("Content-Type: ...", "Status: 404")
 * and an empty line. stderr goes to the function's log.
 *
 * Buffers: a call that returns bytes takes (buf, cap, len_out). It writes at
 * most cap bytes to buf and always stores the full length in *len_out, so
 * *len_out > cap means the answer was cut short.
 *
 * Return values: >= 0 success (see each call), or one of HEARTH_E*.
 */
#ifndef HEARTH_H
#define HEARTH_H

#include <stddef.h>
#include <stdint.h>

#define HEARTH_EDENIED   (-1) /* outbound host not in --allow-host */
#define HEARTH_EINVALID  (-2) /* bad argument (URL, UTF-8, key size) */
#define HEARTH_ENETWORK  (-3) /* connection failed */
#define HEARTH_ETOOLARGE (-4) /* value or response over the limit */
#define HEARTH_ETIMEOUT  (-5) /* the call ran out of time */
#define HEARTH_ESTORAGE  (-6) /* the KV store failed */
#define HEARTH_ETOOMANY  (-7) /* too many calls in one invocation */
#define HEARTH_EOFFTAPE  (-8) /* a replay left its tape (docs/recording.md) */
#define HEARTH_ETAPEFULL (-9) /* the invocation's tape budget is used up */
#define HEARTH_EENDED    (-10) /* the invocation has ended (a call after its response) */
#define HEARTH_EQUOTA    (-11) /* the tenant's KV is full (its quota) */
#define HEARTH_ECONGESTED (-12) /* too many outbound connections open (per invocation, tenant or node); try later */

#define HEARTH_IMPORT(name) __attribute__((import_module("hearth"), import_name(name)))

enum hearth_level { HEARTH_DEBUG = 0, HEARTH_INFO = 1, HEARTH_WARN = 2, HEARTH_ERROR = 3 };

/* A structured log line, shown by `hearth logs`. */
HEARTH_IMPORT("log")
void hearth_log(int32_t level, const char *msg, size_t msg_len);

/* KV, private to this tenant's function and kept across invocations.
 * kv_get: 0 found, 1 not found. kv_delete: 0 deleted, 1 absent. */
HEARTH_IMPORT("kv_get")
int32_t hearth_kv_get(const void *key, size_t key_len, void *buf, size_t cap, size_t *len_out);
HEARTH_IMPORT("kv_set")
int32_t hearth_kv_set(const void *key, size_t key_len, const void *value, size_t value_len);
HEARTH_IMPORT("kv_delete")
int32_t hearth_kv_delete(const void *key, size_t key_len);
/* Keys starting with prefix, in order; buf holds each as a 4-byte
 * little-endian length and the key. Returns the number of keys. */
HEARTH_IMPORT("kv_list")
int32_t hearth_kv_list(const void *prefix, size_t prefix_len, void *buf, size_t cap, size_t *len_out);

/* Outbound HTTP to hosts the function allows. headers: "Name: value\n"
 * lines. Returns the HTTP status and the response body in buf. */
HEARTH_IMPORT("http_fetch")
int32_t hearth_http_fetch(const char *method, size_t method_len,
                          const char *url, size_t url_len,
                          const char *headers, size_t headers_len,
                          const void *body, size_t body_len,
                          void *buf, size_t cap, size_t *len_out);

/* `new URL(text).href` (the WHATWG URL Standard): 0 with the href in buf,
 * 1 if text is not a URL. Pure: no host state, nothing taped. */
HEARTH_IMPORT("url_href")
int32_t hearth_url_href(const char *text, size_t text_len, void *buf, size_t cap, size_t *len_out);

#endif
