;; Fetches the URL given as the request body through `hearth.http_fetch`
;; and answers with what came back, or `denied` / `failed` when the host
;; refused or the request failed.
(module
  (import "wasi_snapshot_preview1" "fd_read"
    (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "hearth" "http_fetch"
    (func $http_fetch (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 4)
  ;; 0: iovec, 8: nread, 12: response length, 16: "GET",
  ;; 32: "denied", 48: "failed", 1024: URL, 65536..: response body
  (data (i32.const 16) "GET")
  (data (i32.const 32) "denied")
  (data (i32.const 48) "failed")
  (func $write (param $ptr i32) (param $len i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")
    (local $status i32) (local $len i32)
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 4096))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (local.set $status
      (call $http_fetch
        (i32.const 16) (i32.const 3)                     ;; method
        (i32.const 1024) (i32.load (i32.const 8))        ;; url
        (i32.const 0) (i32.const 0)                      ;; headers
        (i32.const 0) (i32.const 0)                      ;; body
        (i32.const 65536) (i32.const 131072) (i32.const 12)))
    (if (i32.eq (local.get $status) (i32.const -1))
      (then (call $write (i32.const 32) (i32.const 6)) (return)))
    (if (i32.lt_s (local.get $status) (i32.const 0))
      (then (call $write (i32.const 48) (i32.const 6)) (return)))
    (local.set $len (i32.load (i32.const 12)))
    (if (i32.gt_u (local.get $len) (i32.const 131072))
      (then (local.set $len (i32.const 131072))))
    (call $write (i32.const 65536) (local.get $len))))
