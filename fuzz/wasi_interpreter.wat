;; The wasi fuzz target's guest: reads a program from stdin and runs it,
;; each instruction one call into Hearth's WASI with arguments the fuzzer
;; chose, so every pointer, length, fd and flag reaches the host as a
;; hostile guest could pass it.
;;
;; The program is read to address 16 and runs from there, 17 bytes an
;; instruction: an opcode byte, then four little-endian i32 arguments
;; a b c d. Calls may write over the program (and over anything else in
;; memory); what follows runs as it then reads.
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $environ_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_res_get" (func $clock_res_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_close" (func $fd_close (param i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_fdstat_get" (func $fd_fdstat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_filestat_get" (func $fd_filestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sched_yield" (func $sched_yield (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_seek" (func $fd_seek (param i32 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open" (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "sock_recv" (func $sock_recv (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1 4)
  (func (export "_start")
    (local $p i32) (local $end i32) (local $a i32) (local $b i32) (local $c i32) (local $d i32)
    ;; one iovec at 0: the buffer at 16 and the rest of the first page
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 65504))
    (drop (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
    (local.set $p (i32.const 16))
    (local.set $end (i32.add (i32.const 16) (i32.load (i32.const 8))))
    (block $done
      (loop $next
        (br_if $done (i32.gt_u (i32.add (local.get $p) (i32.const 17)) (local.get $end)))
        (local.set $a (i32.load offset=1 (local.get $p)))
        (local.set $b (i32.load offset=5 (local.get $p)))
        (local.set $c (i32.load offset=9 (local.get $p)))
        (local.set $d (i32.load offset=13 (local.get $p)))
        (block $out (block $b20 (block $b19 (block $b18 (block $b17 (block $b16 (block $b15
        (block $b14 (block $b13 (block $b12 (block $b11 (block $b10 (block $b9
        (block $b8 (block $b7 (block $b6 (block $b5 (block $b4 (block $b3
        (block $b2 (block $b1 (block $b0
          (br_table $b0 $b1 $b2 $b3 $b4 $b5 $b6 $b7 $b8 $b9 $b10 $b11 $b12
                    $b13 $b14 $b15 $b16 $b17 $b18 $b19 $b20
            (i32.rem_u (i32.load8_u (local.get $p)) (i32.const 21))))
          (drop (call $args_sizes_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $args_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $environ_sizes_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $environ_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $clock_res_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $clock_time_get (local.get $a) (i64.extend_i32_u (local.get $c)) (local.get $b))) (br $out))
          (drop (call $random_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $fd_write (local.get $a) (local.get $b) (local.get $c) (local.get $d))) (br $out))
          (drop (call $fd_read (local.get $a) (local.get $b) (local.get $c) (local.get $d))) (br $out))
          (drop (call $fd_close (local.get $a))) (br $out))
          (drop (call $fd_fdstat_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $fd_filestat_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $poll_oneoff (local.get $a) (local.get $b) (local.get $c) (local.get $d))) (br $out))
          (drop (call $sched_yield)) (br $out))
          (call $proc_exit (local.get $a)) (br $out))
          (drop (call $fd_prestat_get (local.get $a) (local.get $b))) (br $out))
          (drop (call $fd_seek (local.get $a) (i64.extend_i32_s (local.get $b)) (local.get $c) (local.get $d))) (br $out))
          (drop (call $path_open (local.get $a) (local.get $b) (local.get $c) (local.get $d) (local.get $a)
                  (i64.extend_i32_u (local.get $b)) (i64.extend_i32_u (local.get $c)) (local.get $d) (local.get $a)))
          (br $out))
          (drop (call $sock_recv (local.get $a) (local.get $b) (local.get $c) (local.get $d) (local.get $a) (local.get $b)))
          (br $out))
          ;; 19: plant a word, a pointer or a length for a later call
          (i32.store (i32.and (local.get $a) (i32.const 0xfffc)) (local.get $b)) (br $out))
        ;; 20: grow memory by 0..3 pages (to the maximum of 4)
        (drop (memory.grow (i32.and (local.get $a) (i32.const 3)))))
        (local.set $p (i32.add (local.get $p) (i32.const 17)))
        (br $next))))
)
