;; preinit.wat: a function with an init step, no toolchain needed.
;; Hearth runs `wizer-initialize` once at deploy and stores the initialized
;; module (crates/hearth-wasm/src/snapshot.rs), so `_start` finds its table
;; already built and says "built at deploy". Deployed somewhere without
;; snapshots it would build the table itself on every invocation and say
;; "built at invocation". `runs=1` on every call shows that each invocation
;; starts from the snapshot, never from the previous invocation's state.
(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $ready (mut i32) (i32.const 0))
  (global $runs (mut i32) (i32.const 0))
  (data (i32.const 0) "built at deploy\n")
  (data (i32.const 32) "built at invocation\n")
  (data (i32.const 64) "runs=?\n")

  ;; squares of 0..999 at 1024 + 4*i
  (func $build
    (local $i i32)
    (loop $next
      (i32.store
        (i32.add (i32.const 1024) (i32.shl (local.get $i) (i32.const 2)))
        (i32.mul (local.get $i) (local.get $i)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $next (i32.lt_u (local.get $i) (i32.const 1000))))
    (global.set $ready (i32.const 1)))

  (func $print (param $ptr i32) (param $len i32)
    (i32.store (i32.const 128) (local.get $ptr))
    (i32.store (i32.const 132) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 136))))

  (func (export "wizer-initialize") (call $build))

  (func (export "_start")
    (if (global.get $ready)
      (then (call $print (i32.const 0) (i32.const 16)))
      (else (call $build) (call $print (i32.const 32) (i32.const 20))))
    ;; the table must hold 999² whichever way it was built
    (if (i32.ne (i32.load (i32.const 5020)) (i32.const 998001)) (then unreachable))
    (global.set $runs (i32.add (global.get $runs) (i32.const 1)))
    (i32.store8 (i32.const 69) (i32.add (i32.const 48) (global.get $runs)))
    (call $print (i32.const 64) (i32.const 7))))
