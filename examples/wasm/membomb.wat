;; Hostile: grows memory until refused, then aborts like an allocator would.
(module
  (memory (export "memory") 1)
  (func (export "_start")
    (loop $grow
      (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
    unreachable))
