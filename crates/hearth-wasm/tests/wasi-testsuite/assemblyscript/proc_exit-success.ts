import { proc_exit } from "@assemblyscript/wasi-shim/assembly/bindings/wasi_snapshot_preview1";

proc_exit(0);
unreachable();
