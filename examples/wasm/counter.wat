;; Counts its invocations in KV (key "count", an 8-byte little-endian
;; integer) and prints the new count in decimal.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "hearth" "kv_get" (func $kv_get (param i32 i32 i32 i32 i32) (result i32)))
  (import "hearth" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; 100: key, 200: value (8 bytes), 208: length out, 300..340: digits
  (data (i32.const 100) "count")
  (func (export "_start")
    (local $n i64) (local $p i32)
    (if (i32.eqz (call $kv_get (i32.const 100) (i32.const 5) (i32.const 200) (i32.const 8) (i32.const 208)))
      (then (local.set $n (i64.load (i32.const 200)))))
    (local.set $n (i64.add (local.get $n) (i64.const 1)))
    (i64.store (i32.const 200) (local.get $n))
    (if (call $kv_set (i32.const 100) (i32.const 5) (i32.const 200) (i32.const 8))
      (then unreachable))
    ;; digits, right to left, ending at 340 with a newline
    (local.set $p (i32.const 339))
    (i32.store8 (i32.const 339) (i32.const 10))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i64.store8 (local.get $p) (i64.add (i64.const 48) (i64.rem_u (local.get $n) (i64.const 10))))
      (local.set $n (i64.div_u (local.get $n) (i64.const 10)))
      (br_if $digit (i64.ne (local.get $n) (i64.const 0))))
    (i32.store (i32.const 0) (local.get $p))
    (i32.store (i32.const 4) (i32.sub (i32.const 340) (local.get $p)))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
