;; Reads the wall clock and 16 random bytes and prints them raw: both come
;; from the host, so both are on the invocation's tape.
(module
  (import "wasi_snapshot_preview1" "clock_time_get"
    (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get"
    (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (drop (call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 104)))
    (drop (call $random_get (i32.const 112) (i32.const 16)))
    (i32.store (i32.const 0) (i32.const 104))
    (i32.store (i32.const 4) (i32.const 24))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
