"""Hearth's process-tier helper: zygote, launcher and Python handler in one.

The node starts one *root zygote* (`helper.py zygote`) as its own child,
with a control connection on fd 3; it imports no tenant's code. Every zygote
that imports packages is contained before it imports (a user namespace,
its own root; see `_fork_contained`). A zygote waits for commands
and forks:

* `fork_zygote`: a child zygote that imports more packages (SOCK's import
  cache: a tree of zygotes, each a superset of its parent's imports);
* `fork_handler`: a sandboxed child that becomes a Python handler;
* `spawn`: a sandboxed child that execs a program (the Node.js helper).

A sandboxed child is made in two forks, so that it is PID 1 of a new PID
namespace: the first child unshares PID, IPC and UTS namespaces and forks
the second, reports its pid and exits. The second chroots into its lean
container, drops to an unprivileged user, sets no_new_privs, installs the
seccomp filter the node wrote, closes every inherited descriptor and
connects to the node on `/tmp/hearth.sock` (the container's scratch).

Every message, both ways, is a frame: u32 header length, u32 body length
(big endian), a JSON header, then the raw body bytes.

Handler code runs only after the node has moved the process into its
cgroup (the node sends nothing before that), so limits hold from the first
line of user code.
"""

import base64
import ctypes
import importlib
import importlib.util
import inspect
import json
import os
import signal
import socket
import struct
import sys
import time
import traceback
import types
from urllib.parse import parse_qsl

# The standard modules every handler needs are imported here, once, by the
# root zygote: a handler forked from it (or pre-forked into the generic
# pool) would otherwise import them on its first load or invocation
# (importlib.util, base64 and urllib.parse cost ~5, ~7 and ~3 ms cold here).

CLONE_NEWUSER = 0x10000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


# ---------------------------------------------------------------- framing


def _recv_exact(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("the node closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock):
    head = _recv_exact(sock, 8)
    hlen, blen = struct.unpack(">II", head)
    header = json.loads(_recv_exact(sock, hlen)) if hlen else {}
    body = _recv_exact(sock, blen) if blen else b""
    return header, body


def send_frame(sock, header, body=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(struct.pack(">II", len(h), len(body)) + h + body)


# ---------------------------------------------------------------- zygote


class Retire(BaseException):
    """The node retired a contained zygote (SIGTERM)."""


def _retire(signum, frame):
    raise Retire()


class Zygote:
    def __init__(self, control, seccomp):
        self.control = control
        self.seccomp = seccomp  # name -> BPF program bytes
        self.imported = []
        # Whether this zygote runs in a container of its own (unprivileged,
        # chrooted, filtered), as every zygote that imports a tenant's
        # packages does when the node is root.
        self.contained = False

    def serve(self):
        # The node retires a zygote only between commands, once it has read
        # the last reply; but Python runs the signal's handler at its next
        # bytecode, which can still be inside send_frame. Wherever Retire
        # lands, the zygote leaves the one way that keeps its children.
        try:
            while True:
                cmd, _ = recv_frame(self.control)
                # A command about a sandbox root carries the root's
                # directory as a descriptor, in one byte's ancillary data:
                # a contained zygote cannot see the node's paths.
                fds = socket.recv_fds(self.control, 1, 1)[1] if cmd.get("fds") else []
                try:
                    reply = getattr(self, "op_" + cmd["op"])(cmd, fds)
                except Exception as e:  # the node gets every failure as text
                    reply = {"error": f"{type(e).__name__}: {e}"}
                finally:
                    for fd in fds:
                        os.close(fd)
                if reply is not None:
                    send_frame(self.control, reply)
        except (EOFError, Retire):
            self.exit()

    def exit(self):
        """Leaves when the node closes the connection or retires us. A
        contained zygote is PID 1 of its namespace, and its handlers die
        with it — and so would the zygote that replaced it, forked from
        it: it stops forking and waits for the last of them."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if self.contained and os.getpid() == 1:
            self.control.close()
            try:
                while True:
                    os.wait()
            except ChildProcessError:
                pass
        os._exit(0)

    def op_ping(self, cmd, fds):
        return {"pid": os.getpid(), "imported": self.imported}

    def op_fork_zygote(self, cmd, fds):
        """A child zygote that imports more packages. With `contain` (the
        node is root) it is contained before it imports anything: the
        root zygote's child gets a user namespace of its own in which it
        is the sandbox user, mount, PID, IPC, UTS and network namespaces,
        and the zygote root as its whole file system; a contained zygote's
        child enters its own root and keeps its parent's filter."""
        if cmd.get("contain") and not self.contained:
            return self._fork_contained(cmd, fds)
        pid = os.fork()
        if pid:
            return {"pid": pid}
        try:
            self.control.close()
            if cmd.get("contain"):
                # Already the sandbox user in our own namespaces: a root
                # of its own is enough (it holds this zygote's packages).
                os.fchdir(fds[0])
                os.chroot(".")
                os.chdir("/")
            self._become_zygote(cmd, fds, filter=False)
        except BaseException:
            traceback.print_exc()
        os._exit(1)

    def _fork_contained(self, cmd, fds):
        uid, gid = cmd["uid"], cmd["gid"]
        up_r, up_w = os.pipe()  # child -> us: "u" once unshared, then the result
        go_r, go_w = os.pipe()  # us -> child: "m" once its ids are mapped
        pid = os.fork()
        if pid:
            os.close(up_w)
            os.close(go_r)
            try:
                first = os.read(up_r, 1)
                if first == b"u":
                    # Only a process outside the new user namespace may map
                    # its ids; we map the sandbox user's alone, onto itself.
                    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                                       ("gid_map", f"{gid} {gid} 1")):
                        with open(f"/proc/{pid}/{name}", "w") as f:
                            f.write(text)
                    os.write(go_w, b"m")
                    first = b""
                data = first
                while chunk := os.read(up_r, 4096):
                    data += chunk
            finally:
                os.close(up_r)
                os.close(go_w)
            if not data:
                return {"error": "the zygote could not be contained (see the node's log)"}
            return json.loads(data)
        try:
            os.close(up_r)
            os.close(go_w)
            self.control.close()
            os.setgroups([])
            # A network of its own, with only loopback, even for functions
            # that list hosts: they go out through the node's egress proxy.
            _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
                                 | CLONE_NEWUTS | CLONE_NEWNET), "unshare")
            os.write(up_w, b"u")
            if os.read(go_r, 1) != b"m":
                raise OSError("the root zygote did not map our user")
            os.close(go_r)
            # The zygote root becomes the whole file system: the host's
            # root is unmounted from this namespace, so there is no way
            # back to it (a chroot could be left with the capabilities
            # this process keeps in its user namespace). Done while still
            # the owner of the node's directories, which lead to the root.
            root = cmd["root"].encode()
            _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(private)")
            _check(_libc.mount(root, root, None, MS_BIND | MS_REC, None), "mount(bind)")
            os.chdir(root)
            _check(_libc.syscall(cmd["pivot_root_nr"], b".", b"."), "pivot_root")
            _check(_libc.umount2(b".", MNT_DETACH), "umount(old root)")
            os.chdir("/")
            # From root to the sandbox user; the capabilities this process
            # has in its own user namespace stay (they reach nothing else).
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            hostname = b"zygote"
            _check(_libc.sethostname(hostname, len(hostname)), "sethostname")
            loopback_up()
            zygote = os.fork()  # PID 1 of the new PID namespace
            if zygote:
                os.write(up_w, json.dumps({"pid": zygote}).encode())
                os._exit(0)
            os.close(up_w)
            self.contained = True
            self._become_zygote(cmd, fds, filter=True)
        except BaseException as e:
            _report_failure(up_w, e)
        os._exit(1)

    def _become_zygote(self, cmd, fds, filter):
        """Takes the zygote filter (`filter`: a contained zygote's child
        has it already), connects to the node, imports the packages and
        serves."""
        for fd in fds:
            os.close(fd)
        if filter:
            signal.signal(signal.SIGTERM, _retire)
            _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
            for name in (cmd["seccomp"], "noclone3"):
                install_seccomp(self.seccomp[name])
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(cmd["connect"])
        # What native libraries read when they load (thread counts): the
        # functions this zygote serves all have these values.
        os.environ.update(cmd.get("env", {}))
        imported, failed = import_modules(cmd.get("paths", []), cmd.get("modules", []))
        self.control = sock
        self.imported = self.imported + imported
        send_frame(sock, {"op": "ready", "pid": os.getpid(),
                          "imported": imported, "failed": failed})
        self.serve()

    def op_fork_handler(self, cmd, fds):
        return self._sandboxed(cmd, fds, lambda sock: Handler(sock).serve())

    def op_spawn(self, cmd, fds):
        argv = cmd["argv"]
        env = cmd.get("env", {})

        def run(sock):
            # The program finds the node on fd 3.
            if sock.fileno() == 3:
                os.set_inheritable(3, True)
            else:
                os.dup2(sock.fileno(), 3, inheritable=True)
            os.execve(argv[0], argv, env)

        return self._sandboxed(cmd, fds, run)

    def _sandboxed(self, cmd, fds, then):
        r, w = os.pipe()
        first = os.fork()
        if first:
            os.close(w)
            data = b""
            while True:
                chunk = os.read(r, 64)
                if not chunk:
                    break
                data += chunk
            os.close(r)
            # `first` exits once it has written; SIGCHLD is ignored, so the
            # kernel reaps it (waiting here would wait for every sandbox).
            if not data:
                return {"error": "the sandbox could not be started (see the node's log)"}
            msg = json.loads(data)
            return msg
        # First child: new namespaces, then the sandbox is our child (PID 1).
        try:
            os.close(r)
            isolation = cmd.get("isolation", "full")
            net = CLONE_NEWNET if cmd.get("netns") else 0
            if isolation == "full":
                _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | net), "unshare")
            elif isolation == "userns":
                enter_user_namespace(cmd["uid"], cmd["gid"], net)
            if net and isolation != "none":
                loopback_up()
            second = os.fork()
            if second:
                os.write(w, json.dumps({"pid": second}).encode())
                os._exit(0)
            os.close(w)
            filters = [self.seccomp[cmd["seccomp"]], self.seccomp["noclone3"]]
            sock = enter_sandbox(cmd, fds, filters)
            then(sock)
        except BaseException as e:
            _report_failure(w, e)
        os._exit(1)


def _report_failure(fd, e):
    """A forked child that could not become what it was for tells its
    parent why on `fd` (the parent answers the node with it) and logs the
    traceback."""
    try:
        os.write(fd, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())
    except OSError:
        pass
    traceback.print_exc()


def import_modules(paths, modules):
    for p in paths:
        if p not in sys.path:
            sys.path.append(p)
    imported, failed = [], []
    for m in modules:
        try:
            __import__(m)
            imported.append(m)
        except BaseException as e:  # a package that fails to import is skipped
            failed.append(f"{m}: {type(e).__name__}: {e}")
    return imported, failed


def package_modules_since(before, paths, most=64):
    """The modules imported since `before` whose files are under one of
    `paths` (the function's packages; never its own code): what a zygote
    of these packages could import ahead of the next handler."""
    roots = tuple(os.path.join(p, "") for p in paths)
    found = []
    for name, module in list(sys.modules.items()):
        if name in before:
            continue
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(roots):
            found.append(name)
            if len(found) == most:
                break
    return found


def enter_user_namespace(uid, gid, extra=0):
    """Without root: a new user namespace (this process's user seen as
    `uid` inside) owning new PID, IPC and UTS namespaces (and `extra`)."""
    outer_uid, outer_gid = os.getuid(), os.getgid()
    _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | extra),
           "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {outer_uid} 1"),
                       ("gid_map", f"{gid} {outer_gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def loopback_up():
    """Brings up `lo` in a new network namespace (it starts down), so code
    may still talk to itself over 127.0.0.1. (Through a Unix socket: a
    zygote's filter may refuse internet ones.)"""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        import fcntl
        ifr = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    """Drops the capabilities a new user namespace granted."""
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _vm_size():
    """Bytes this process maps (VmSize)."""
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))


def enter_sandbox(cmd, fds, filters):
    """Turns this process into a sandbox; returns its connection to the node.

    `isolation` says how: "full" (the node is root: namespaces, chroot,
    unprivileged user), "userns" (not root: a user namespace with PID, IPC
    and UTS namespaces, no chroot) or "none". seccomp and no_new_privs apply
    in every case; the node reports what is missing at startup.
    """
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    isolation = cmd.get("isolation", "full")
    # Read while /proc is in reach: a chrooted sandbox has none.
    vm_size = _vm_size() if cmd.get("extra_memory_bytes") else 0
    if isolation == "userns":
        hostname = cmd.get("hostname", "sandbox").encode()
        _check(_libc.sethostname(hostname, len(hostname)), "sethostname")
        drop_capabilities()
    if isolation == "full":
        hostname = cmd.get("hostname", "sandbox").encode()
        _check(_libc.sethostname(hostname, len(hostname)), "sethostname")
        # The root by descriptor: a contained zygote cannot see its path.
        os.fchdir(fds[0])
        os.chroot(".")
        os.chdir("/")
        uid, gid = cmd["uid"], cmd["gid"]
        if os.getgroups():
            os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        # Forked from a contained zygote, we are already that user and
        # still hold its capabilities in its user namespace.
        drop_capabilities()
    if cmd.get("extra_memory_bytes"):
        # No cgroup to hold memory: cap the address space at what the
        # process maps now plus the function's limit.
        import resource
        cap = vm_size + int(cmd["extra_memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    for bpf in filters:
        install_seccomp(bpf)
    # Nothing of the zygote's (its control socket, files) stays open.
    os.closerange(3, 1 << 16)
    # A spawned program keeps the node's stderr for its own crash reports.
    std = ((0, os.O_RDONLY), (1, os.O_WRONLY)) + (() if cmd.get("keep_stderr") else ((2, os.O_WRONLY),))
    for fd, flags in std:
        nfd = os.open("/dev/null", flags)
        if nfd != fd:
            os.dup2(nfd, fd)
            os.close(nfd)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(cmd["socket"])
    if cmd.get("egress"):
        start_egress_relay(cmd["egress"])
    return sock


# Proxy variables for a function that lists hosts (see start_egress_relay).
_EGRESS_ENV = {}


def start_egress_relay(path, port=3128):
    """The sandbox's network has only loopback; a function that lists hosts
    goes out through the node's egress proxy (CONNECT and absolute-form
    HTTP, under the function's allow-list) on the Unix socket `path`. This
    relays 127.0.0.1:`port` to it, and the proxy variables that HTTP
    clients follow point there."""
    import threading
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)

    def pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def serve():
        while True:
            client, _ = server.accept()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(path)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        _EGRESS_ENV[name] = url
    _EGRESS_ENV["NO_PROXY"] = _EGRESS_ENV["no_proxy"] = "localhost,127.0.0.1,::1"


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def install_seccomp(bpf):
    n = len(bpf) // 8
    prog = (_SockFilter * n).from_buffer_copy(bpf)
    fprog = _SockFprog(n, prog)
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
           "prctl(SECCOMP)")


# ---------------------------------------------------------------- handler


class HostError(Exception):
    """A host call failed (denied, timed out, too large, ...)."""


class _Output:
    """sys.stdout / sys.stderr of a handler: lines go to the function's log."""

    def __init__(self, handler, stream):
        self.handler, self.stream, self.buf = handler, stream, ""

    def write(self, s):
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            self.handler.log(line, stream=self.stream)
        return len(s)

    def flush(self):
        if self.buf:
            self.handler.log(self.buf, stream=self.stream)
            self.buf = ""

    def isatty(self):
        return False


class FetchResponse:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<FetchResponse {self.status}, {len(self.body)} bytes>"


def _make_hearth_module(handler):
    mod = types.ModuleType("hearth")
    mod.HostError = HostError
    mod.FetchResponse = FetchResponse

    def _key(k):
        return k.encode() if isinstance(k, str) else bytes(k)

    class KV:
        """Key-value store scoped to this function (and its tenant)."""

        def get(self, key):
            h, body = handler.call({"call": "kv_get", "key": _key(key).hex()})
            return body if h.get("found") else None

        def set(self, key, value):
            value = value.encode() if isinstance(value, str) else bytes(value)
            handler.call({"call": "kv_set", "key": _key(key).hex()}, value)

        def delete(self, key):
            h, _ = handler.call({"call": "kv_delete", "key": _key(key).hex()})
            return bool(h.get("existed"))

        def list(self, prefix=""):
            h, _ = handler.call({"call": "kv_list", "prefix": _key(prefix).hex()})
            return [bytes.fromhex(k).decode("utf-8", "replace") for k in h["keys"]]

    def fetch(url, method="GET", headers=None, body=b""):
        """Outbound HTTP through the node (the function's allow-list applies)."""
        if isinstance(body, str):
            body = body.encode()
        hdrs = list((headers or {}).items()) if isinstance(headers, dict) else list(headers or [])
        h, data = handler.call({"call": "http_fetch", "url": url, "method": method,
                                "headers": hdrs}, bytes(body))
        return FetchResponse(h["status"], dict(h["headers"]), data)

    def log(message, level="info"):
        handler.log(str(message), level=level, stream="log")

    def wait_until(work, *args, **kwargs):
        """Runs `work(*args, **kwargs)` (or awaits `work`, a coroutine)
        after the response has gone to the caller, within the invocation's
        timeout: work after the response (docs/events.md)."""
        if not handler.invoking:
            raise RuntimeError("hearth.wait_until is for work an invocation leaves after its response")
        if not callable(work) and not inspect.iscoroutine(work):
            raise TypeError("hearth.wait_until takes a function or a coroutine")
        handler.after.append((work, args, kwargs))

    mod.kv = KV()
    mod.fetch = fetch
    mod.log = log
    mod.wait_until = wait_until
    return mod


_real = {name: getattr(time, name) for name in
         ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")}
_real["urandom"] = os.urandom


def _route_through_host(handler):
    """During an invocation, clocks and randomness are answered by the node,
    so they are on the invocation's tape and a replay sees the same values.
    Outside one (module load) they are the real ones, and so they are in a
    process the handler forked: it shares the handler's connection to the
    node, and its questions would interleave with the handler's. Not
    covered: code that bound a function before this ran (`from time import
    time` in a zygote package) and C-level clocks such as datetime.now();
    docs/recording.md."""

    def host(real, ask):
        def f(*args):
            routed = handler.invoking and os.getpid() == handler.pid
            return ask(*args) if routed else _real[real](*args)
        return f

    def wall_ns():
        return handler.call({"call": "clock_wall"})[0]["nanos"]

    def mono_ns():
        return handler.call({"call": "clock_monotonic"})[0]["nanos"]

    def urandom(n):
        n = int(n)
        if n < 0:
            raise ValueError("negative argument not allowed")
        out = b""
        while len(out) < n:
            out += handler.call({"call": "random", "n": min(n - len(out), 65536)})[1]
        return out

    time.time_ns = host("time_ns", wall_ns)
    time.time = host("time", lambda: wall_ns() / 1e9)
    time.monotonic_ns = host("monotonic_ns", mono_ns)
    time.monotonic = host("monotonic", lambda: mono_ns() / 1e9)
    time.perf_counter_ns = host("perf_counter_ns", mono_ns)
    time.perf_counter = host("perf_counter", lambda: mono_ns() / 1e9)
    os.urandom = host("urandom", urandom)
    return urandom


class Handler:
    def __init__(self, sock):
        self.sock = sock
        self.fn = None
        self.shape = None
        self.arity = 2
        self.load_error = None
        # Modules of the function's packages that loading it imported (for
        # the node's import cache to learn: `PIL.Image` where a zygote
        # imported only `PIL`).
        self.imported = []
        self.invoking = False
        # Work the invocation left for after its response (wait_until).
        self.after = []
        # Only this process talks to the node: a child it forks shares the
        # connection, and its frames would interleave with ours.
        self.pid = os.getpid()
        self.urandom = _route_through_host(self)
        sys.modules["hearth"] = _make_hearth_module(self)
        sys.stdout = _Output(self, "log")
        sys.stderr = _Output(self, "stderr")

    # ---- talking to the node
    def call(self, header, body=b""):
        if os.getpid() != self.pid:
            raise HostError(
                "hearth.kv, hearth.fetch and the other host calls work only in the "
                "handler's own process, not in a process it forked (which shares its "
                "connection to the node): make the call in the handler and pass the "
                "result to the child")
        header["op"] = "call"
        send_frame(self.sock, header, body)
        reply, data = recv_frame(self.sock)
        if "error" in reply:
            raise HostError(reply["error"])
        return reply, data

    def log(self, message, level="info", stream="log"):
        send_frame(self.sock, {"op": "log", "level": level, "stream": stream},
                   message.encode("utf-8", "replace"))

    def serve(self):
        while True:
            try:
                msg, body = recv_frame(self.sock)
            except EOFError:
                os._exit(0)
            if msg["op"] == "load":
                self.load(msg)
                send_frame(self.sock, {"op": "loaded", "error": self.load_error,
                                       "imported": self.imported})
            elif msg["op"] == "invoke":
                self.invoke(msg, body)

    def load(self, msg):
        os.environ.clear()
        os.environ.update(msg.get("env", {}))
        os.environ.update(_EGRESS_ENV)
        code_dir = msg.get("code", "/code")
        paths = msg.get("paths", [])
        for p in [code_dir] + paths:
            if p not in sys.path:
                sys.path.insert(0 if p == code_dir else len(sys.path), p)
        entry = msg["entry"]
        # Only a function with packages has package modules to report.
        before = set(sys.modules) if paths else None
        try:
            os.chdir(scratch_cwd(code_dir, msg.get("workdir")))
            mod = import_entry(code_dir, entry)
        except BaseException:
            self.load_error = _traceback_text()
            return
        self.imported = package_modules_since(before, paths) if paths else []
        # The handler setting's function, or the default names in order
        # (the node's list, which its deploy check also uses).
        wanted = msg["handlers"]
        for name in wanted:
            fn = getattr(mod, name, None)
            if callable(fn):
                self.fn, self.shape = fn, ("openwhisk" if name == "main" else "lambda")
                self.arity = positional_arity(fn)
                return
        self.load_error = f"{entry} defines no function named {' or '.join(wanted)}"

    def invoke(self, msg, body):
        if self.load_error:
            self.log(self.load_error, level="error", stream="stderr")
            send_frame(self.sock, {"op": "error", "message": self.load_error.strip().splitlines()[-1]})
            return
        self.invoking = True
        self.after = []
        rnd = sys.modules.get("random")
        if rnd is not None:
            # The module's generator, seeded from the tape: random.random()
            # and friends replay exactly. SystemRandom reads os.urandom.
            rnd._urandom = os.urandom
            rnd.seed(self.urandom(32))
        try:
            firing = scheduled_event(msg, body)
            if self.shape == "lambda":
                event = firing if firing is not None else lambda_event(msg, body)
                args = (event, Context(msg))[:self.arity]
                result = self.fn(*args)
            else:
                params = firing if firing is not None else openwhisk_params(msg, body)
                result = self.fn(*(params,)[:self.arity])
            if inspect.iscoroutine(result):
                import asyncio
                result = asyncio.run(result)
            if self.shape == "openwhisk":
                result = openwhisk_result(result)
            status, headers, out = make_response(result)
        except BaseException:
            text = _traceback_text()
            sys.stdout.flush()
            self.log(text.rstrip(), level="error", stream="stderr")
            if self.after:
                self.log(f"{len(self.after)} function(s) passed to hearth.wait_until did not run: "
                         "the handler raised", level="error", stream="stderr")
                self.after = []
            send_frame(self.sock, {"op": "error", "message": text.strip().splitlines()[-1]})
            return
        finally:
            self.invoking = False
        sys.stdout.flush()
        sys.stderr.flush()
        if not self.after:
            send_frame(self.sock, {"op": "response", "status": status, "headers": headers}, out)
            return
        # The caller gets its answer now; the work follows, then `done`.
        send_frame(self.sock, {"op": "response", "status": status, "headers": headers,
                               "after": True}, out)
        self.run_after()
        send_frame(self.sock, {"op": "done"})

    def run_after(self):
        """Runs what the invocation passed to hearth.wait_until, in order;
        one that raises is logged and the rest still run."""
        self.invoking = True
        try:
            for work, args, kwargs in self.after:
                try:
                    result = work(*args, **kwargs) if callable(work) else work
                    if inspect.iscoroutine(result):
                        import asyncio
                        asyncio.run(result)
                except BaseException:
                    text = _traceback_text()
                    self.log("a function passed to hearth.wait_until raised: " + text.rstrip(),
                             level="error", stream="stderr")
        finally:
            self.after = []
            self.invoking = False
            sys.stdout.flush()
            sys.stderr.flush()


def _traceback_text():
    etype, value, tb = sys.exc_info()
    # Drop the helper's own frames: the user's code is what matters.
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(etype, value, tb))


class Context:
    """Lambda's context object (the Python runtime's attributes)."""

    def __init__(self, msg):
        self.aws_request_id = self.invocation_id = msg.get("id", "")
        self.function_name = msg.get("function", "")
        self.function_version = str(msg.get("version", ""))
        self.invoked_function_arn = f"arn:hearth:function:{msg.get('tenant', '')}:{self.function_name}"
        self.memory_limit_in_mb = msg.get("memory_mib", 0)
        self.log_group_name = f"/hearth/{msg.get('tenant', '')}/{self.function_name}"
        self.log_stream_name = self.function_version
        self.identity = self.client_context = None
        self._deadline = _real["monotonic"]() + msg.get("remaining_ms", 0) / 1000

    def get_remaining_time_in_millis(self):
        return max(0, int((self._deadline - _real["monotonic"]()) * 1000))


def import_entry(code_dir, entry):
    """Imports the entry file under its own module name (`app` for app.py,
    `pkg.mod` for pkg/mod.py), as Lambda does, so relative imports and
    `import app` elsewhere see the same module. A name the helper already
    imported (`json.py` would be `json`) is loaded from its file instead."""
    name = entry[:-3].replace("/", ".")
    if name.endswith(".__init__"):
        name = name[: -len(".__init__")]
    if name not in sys.modules:
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location("__hearth_main__", os.path.join(code_dir, entry))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["__hearth_main__"] = mod
    spec.loader.exec_module(mod)
    return mod


def positional_arity(fn):
    """How many of (event, context) `fn` takes: Lambda handlers are written
    `handler(event, context)` and `handler(event)`, OpenWhisk's `main(args)`
    and `main()`."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    n = 0
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            return 2
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return min(n, 2)


def scratch_cwd(code_dir, work):
    """The handler's working directory: `work` (the node sends it when the
    sandbox has a /tmp of its own), writable, with the code's files in it.
    OpenWhisk and most containers run a function where it may write next
    to its code; code written for Lambda (read-only /var/task) writes to
    /tmp, which works too. The code stays read-only: `work` holds symbolic
    links to it."""
    if not work:
        return code_dir
    os.mkdir(work, 0o755)
    for name in os.listdir(code_dir):
        os.symlink(os.path.join(code_dir, name), os.path.join(work, name))
    return work


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _split_request(msg, body):
    """Headers (comma-joined, and as lists), the query as lists, and the
    body as API Gateway passes it: text, or base64 when it is not UTF-8."""
    multi_headers = {}
    for k, v in msg.get("headers", []):
        multi_headers.setdefault(k, []).append(v)
    multi_query = {}
    for k, v in parse_qsl(msg.get("query", ""), keep_blank_values=True):
        multi_query.setdefault(k, []).append(v)
    try:
        text, is_b64 = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, is_b64 = base64.b64encode(body).decode(), True
    headers = {k: ",".join(v) for k, v in multi_headers.items()}
    return headers, multi_headers, multi_query, text, is_b64


def scheduled_event(msg, body):
    """A schedule's firing (docs/events.md), or None: the platform's own
    `hearth-event: scheduled` header (the node takes it out of every
    request that does not come from Hearth's queue) and an EventBridge
    scheduled event as the body, which the handler gets whole."""
    for k, v in msg.get("headers", []):
        if k.lower() == "hearth-event" and v == "scheduled":
            return json.loads(body)
    return None


def lambda_event(msg, body):
    """The event API Gateway sends a Lambda proxy integration: payload
    format 2.0 (HTTP APIs, function URLs) and 1.0 (REST APIs) in one
    object, since their fields do not collide; docs/compatibility.md.
    Its time is the invocation's start (`wall_ms`, read by the node from
    its taped clock, so a replay sees the same)."""
    method, path, raw_query = msg.get("method", "GET"), msg.get("path", "/"), msg.get("query", "")
    wall_ms = msg["wall_ms"]
    headers, multi_headers, multi_query, text, is_b64 = _split_request(msg, body)
    query = {k: ",".join(v) for k, v in multi_query.items()} or None
    t = time.gmtime(wall_ms // 1000)
    when = (f"{t.tm_mday:02d}/{_MONTHS[t.tm_mon - 1]}/{t.tm_year}:"
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000")
    host = headers.get("host", "")
    source_ip = headers.get("x-forwarded-for", "").split(",")[0].strip() or "127.0.0.1"
    agent = headers.get("user-agent", "")
    proxy = path.lstrip("/")
    event = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": raw_query,
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": multi_headers,
        "queryStringParameters": query,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": proxy} if proxy else None,
        "stageVariables": None,
        "requestContext": {
            "accountId": msg.get("tenant", ""),
            "apiId": msg.get("function", ""),
            "domainName": host,
            "domainPrefix": host.split(".")[0],
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1",
                     "sourceIp": source_ip, "userAgent": agent},
            "httpMethod": method,
            "identity": {"sourceIp": source_ip, "userAgent": agent},
            "path": path,
            "protocol": "HTTP/1.1",
            "requestId": msg.get("id", ""),
            "requestTime": when,
            "requestTimeEpoch": wall_ms,
            "resourcePath": "/{proxy+}",
            "routeKey": "$default",
            "stage": "$default",
            "time": when,
            "timeEpoch": wall_ms,
        },
        "body": text if body else None,
        "isBase64Encoded": is_b64,
    }
    cookies = [c.strip() for h in multi_headers.get("cookie", []) for c in h.split(";") if c.strip()]
    if cookies:
        event["cookies"] = cookies
    return event


def openwhisk_params(msg, body):
    """A web action's parameters as OpenWhisk builds them: query parameters,
    then the body's (a JSON object's members, or form fields) over them,
    and `__ow_method`, `__ow_headers`, `__ow_path`; any other body arrives
    whole as `__ow_body` (base64 when binary)."""
    headers, _, multi_query, text, is_b64 = _split_request(msg, body)
    params = {k: v[-1] for k, v in multi_query.items()}
    ctype = headers.get("content-type", "").split(";")[0].strip().lower()
    merged = None
    if body and not is_b64 and ctype == "application/json":
        try:
            merged = json.loads(text)
        except ValueError:
            merged = None
        if not isinstance(merged, dict):
            merged = None
    elif body and not is_b64 and ctype == "application/x-www-form-urlencoded":
        merged = dict(parse_qsl(text, keep_blank_values=True))
    if merged is not None:
        params.update(merged)
    elif body:
        params["__ow_body"] = text
    path = msg.get("path", "/")
    params.update({"__ow_method": msg.get("method", "GET").lower(), "__ow_headers": headers,
                   "__ow_path": "" if path == "/" else path})
    return params


def openwhisk_result(result):
    """An action that returns `{"error": ...}` failed (OpenWhisk's
    application error): the error is the response if it is one, else a 400
    with the error as JSON."""
    if isinstance(result, dict) and "error" in result:
        err = result["error"]
        if isinstance(err, dict) and ("statusCode" in err or "body" in err):
            return err
        return {"statusCode": 400, "body": {"error": err}}
    return result


def make_response(result):
    if isinstance(result, dict) and ("statusCode" in result or "body" in result):
        status = int(result.get("statusCode", 200))
        headers = [[str(k), str(v)] for k, v in (result.get("headers") or {}).items()]
        body = result.get("body", "")
        if result.get("isBase64Encoded") and isinstance(body, str):
            body = base64.b64decode(body)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            if not any(k.lower() == "content-type" for k, _ in headers):
                headers.append(["content-type", "application/json"])
        if isinstance(body, str):
            body = body.encode()
        if body is None:
            body = b""
        return status, headers, bytes(body)
    if result is None:
        return 204, [], b""
    if isinstance(result, (bytes, bytearray)):
        return 200, [["content-type", "application/octet-stream"]], bytes(result)
    if isinstance(result, str):
        return 200, [["content-type", "text/plain; charset=utf-8"]], result.encode()
    return 200, [["content-type", "application/json"]], json.dumps(result).encode()


# ---------------------------------------------------------------- main


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode != "zygote":
        sys.exit("usage: helper.py zygote   (started by the Hearth node)")
    _check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(SUBREAPER)")
    # Zygotes reap their children (and orphaned sandboxes) automatically.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    seccomp = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for name in os.listdir(here):
        if name.endswith(".bpf"):
            with open(os.path.join(here, name), "rb") as f:
                seccomp[name[:-4]] = f.read()
    control = socket.socket(fileno=3)
    Zygote(control, seccomp).serve()


if __name__ == "__main__":
    main()
