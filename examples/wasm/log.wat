;; Writes a line to stderr and a structured log line, then answers "ok".
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "hearth" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "to stderr\n")
  (data (i32.const 200) "structured hello")
  (data (i32.const 300) "ok")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 100))
    (i32.store (i32.const 4) (i32.const 10))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $log (i32.const 2) (i32.const 200) (i32.const 16))
    (i32.store (i32.const 0) (i32.const 300))
    (i32.store (i32.const 4) (i32.const 2))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
