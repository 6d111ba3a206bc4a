;; The smallest Hearth function: a WASI command that prints a CGI header
;; block and a body. Deploy it as is: `hearth deploy hello.wat --name hello`.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "Content-Type: text/plain\n\nhello from wasm\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))   ;; iovec.buf
    (i32.store (i32.const 4) (i32.const 42))   ;; iovec.len
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
