;; Hostile: loops forever. Hearth stops it at its deadline (504) while other
;; functions keep serving.
(module
  (memory (export "memory") 1)
  (func (export "_start") (loop $forever (br $forever))))
