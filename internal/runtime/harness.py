# codecage harness: runs inside the jail as `python3 -I -S -B -X utf8 -c <this>`.
# It reads requests from fd 3 (4-byte big-endian length + a marshal-encoded
# dict), runs each request's code as __main__ and answers with one frame of
# JSON. The jail, not this file, is the security boundary: the import policy
# here is a convenience.
#
# Start-up time is the product's latency, so nothing is imported at start
# that the interpreter has not loaded already: marshal and _ast are built in,
# and the reply's JSON is written by hand (json and ast pull in re and enum,
# about 15 ms).
import _thread  # built in, loaded with the interpreter
import sys


def _harness():
    import builtins
    import marshal
    import os

    ready = _stdin_channel(os)
    _site_paths(os)
    _seed_matplotlib_cache(os)
    _quiet_psutil()
    _hook_pil_show()
    _hook_notebook(builtins)
    _preload(os)
    if os.environ.get("CODECAGE_ZYGOTE"):
        # Returns only in a cell: a fork, in fresh namespaces, restricted.
        _zygote(os)
    for name in ("CODECAGE_ZYGOTE", "CODECAGE_PRELOAD", "CODECAGE_MPL_CACHE", "CODECAGE_USER_SITE", "LD_BIND_NOW"):
        os.environ.pop(name, None)  # the code's environment stays minimal
    for stream in (sys.stdout, sys.stderr):
        # Line buffering: a run killed at its limit still shows what it printed.
        stream.reconfigure(line_buffering=True, errors="surrogateescape")
    _close_inherited(os)
    _serve(os, builtins, marshal, 3, ready)


def _close_inherited(os):
    # The code starts with 0-2 and the channel (fd 3) alone, on every
    # backend: a descriptor a runtime or a backend left open (the native
    # init passes only these, runsc only stdio) would otherwise be the
    # code's to use, unasked. One close_range (seccomp allows it; Python
    # walks the descriptors where a kernel lacks it).
    os.closerange(4, 1 << 30)


def _stdin_channel(os):
    # gVisor passes only the standard descriptors: the channel is stdin.
    # Move it to fd 3, give the code an empty stdin like the native jail's,
    # and (the caller) say when the slowly booting sandbox can take code.
    try:
        os.fstat(3)
        return False
    except OSError:
        pass
    os.dup2(0, 3)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if os.getpid() == 1:
        _init(os)
    return True


def _init(os):
    # gVisor starts the harness as PID 1. As in the native jail, an init
    # that is not the code's own process stays PID 1: it reaps orphans, is
    # immune to the code's signals, and, not dumpable, keeps its /proc
    # entries closed to the code. Returns only in the child, the harness.
    # The network profile: the init relays 127.0.0.1:<port> to the host's
    # egress proxy through a unix socket bound in (gVisor passes no
    # descriptors). It listens before the code starts, so no connection
    # is refused for being early.
    forward = os.environ.pop("CODECAGE_FORWARD", "")
    # A gVisor machine with root inside: the init, root, serves its sudo
    # (gvisor's sudod.py); the harness becomes the machine's user.
    sudo, server = os.environ.pop("CODECAGE_SUDO", ""), os.environ.pop("CODECAGE_SUDO_SERVER", "")
    if sudo:
        ns = {}
        exec(server, ns)
        sudo = ns["Sudo"](sudo)
    listener = None
    if forward:
        import socket

        port, _, path = forward.partition(":")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
    import ctypes

    # Not dumpable from before the fork: set after it, the code (which the
    # child runs at once) could open /proc/1 while the init had not got
    # there yet, as a loaded host showed. The child is dumpable again, as
    # the harness is natively.
    prctl = ctypes.CDLL(None).prctl
    prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    pid = os.fork()
    if pid == 0:
        if sudo:
            sudo.drop()  # before PR_SET_DUMPABLE: a change of ids clears it
        prctl(4, 1, 0, 0, 0)
        if listener is not None:
            listener.close()
        return
    for fd in (0, 1, 2, 3):
        os.close(fd)
    if listener is not None:
        _relay(listener, path)
    if sudo:
        sudo.start()
    code = 1
    while True:
        try:
            child, status = os.wait()
        except ChildProcessError:
            break
        if child == pid:
            code = os.waitstatus_to_exitcode(status)
            break
        if sudo:
            sudo.reaped(child, status)
    os._exit(code if code >= 0 else 128 - code)


def _relay(listener, path):
    # Copies each accepted connection to and from a new connection to path,
    # in daemon threads of the init.
    import socket
    import threading

    def pump(src, dst, done):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        if done.acquire(blocking=False):
            return  # the other direction closes both
        src.close()
        dst.close()

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                up.connect(path)
            except OSError:
                conn.close()
                up.close()
                continue
            done = threading.Lock()
            threading.Thread(target=pump, args=(conn, up, done), daemon=True).start()
            threading.Thread(target=pump, args=(up, conn, done), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()


def _serve(os, builtins, marshal, chan, ready=None):
    os.set_inheritable(chan, False)  # subprocesses of the code do not get it
    pid = os.getpid()

    def read_exact(n):
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(chan, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def read_frame():
        head = read_exact(4)
        if head is None:
            return None
        body = read_exact(int.from_bytes(head, "big"))
        return None if body is None else marshal.loads(body)

    def write_frame(obj):
        # Lone surrogates (bytes the code decoded with surrogateescape)
        # leave as JSON escapes: the supervisor reads them as U+FFFD.
        try:
            body = _json(obj, _MAX_REPLY).encode("utf-8", "backslashreplace")
            if len(body) > _MAX_REPLY:
                raise _TooBig()
        except Exception as e:
            # Every part of a reply is bounded; should one still not go,
            # the run is answered with why, not lost.
            why = "it passes %d bytes" % _MAX_REPLY if isinstance(e, _TooBig) else _clip(str(e))
            body = _json({"result": None, "result_type": None, "variables": [], "exit_code": 1, "images": [],
                          "error": {"type": "ReplyError", "message": "codecage could not send the run's reply: " + why, "traceback": ""}}).encode("utf-8", "backslashreplace")
        data = len(body).to_bytes(4, "big") + body
        while data:
            data = data[os.write(chan, data):]

    real_import = builtins.__import__
    # A session's interpreter states, kept from one request to the next:
    # by context name, its __main__ and its working directory.
    contexts = {}
    _channel[:] = [read_frame, write_frame]
    if ready:
        # A sandbox that boots slowly (gVisor) says when it can take code,
        # so a pool hands out only sandboxes that are really warm.
        write_frame({"ready": True})

    while True:
        req = read_frame()
        if req is None:
            os._exit(0)
        if req.get("op"):
            reply = _state_op(req, contexts, chan, builtins, real_import)
            if os.getpid() != pid:
                os._exit(0)  # a fork of the code's, in a value's reduction
            write_frame(reply)
            continue
        if req.get("language"):
            # JavaScript, TypeScript, bash: a kernel process of the context's (kernels.py).
            _finish(os, req, _kernel_run(req), write_frame)
            continue
        name = req.get("context", "")
        ctx = contexts.get(name)
        if ctx is None or req.get("new_context") or not req.get("keep_alive"):
            main = type(sys)("__main__")
            main.__dict__["__builtins__"] = builtins
            ctx = contexts[name] = [main, req.get("cwd")]
        if ctx[1]:
            try:
                os.chdir(ctx[1])
            except OSError:
                pass
        env = req.get("env")
        saved = {k: os.environ.get(k) for k in env} if env else None
        if env:
            os.environ.update(env)
        reply = _run(req, builtins, real_import, ctx[0])
        if saved:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if len(contexts) > 1 or ctx[1]:
            try:
                ctx[1] = os.getcwd()  # each context keeps its own directory
            except OSError:
                pass
        if os.getpid() != pid:
            # A process the code forked fell off the end of the code: it must
            # not answer for the harness.
            os._exit(0)
        _finish(os, req, reply, write_frame)


def _finish(os, req, reply, write_frame):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    marker = req.get("end_marker")
    if marker:
        # Tells the supervisor this request's output is complete (a
        # session's pipes outlive the request). Raw writes: the code may
        # have replaced sys.stdout.
        for fd in (1, 2):
            try:
                os.write(fd, marker.encode())
            except OSError:
                pass
    write_frame(reply)
    if not req.get("keep_alive"):
        os._exit(0)


# The channel's frame functions, for the tools object (set by _serve).
_channel = []

# The state module (state.py), once a state request has loaded it.
_state_module = []


def _state_op(req, contexts, chan, builtins, real_import):
    # Snapshot and restore of every context's globals (#26), in state.py,
    # which the supervisor sends as the request's code: loaded once as
    # module _codecage_state, so that the functions it saves can name it.
    # The bytes travel in a pipe whose end follows the request on the
    # channel (SCM_RIGHTS), not in frames: a state of any size streams.
    import os

    op = req.get("op")
    fd = -1
    try:
        if op != "warm":  # the only one without a pipe
            fd = _receive_fd(os, chan)
        builtins.__import__ = real_import  # the import policy is the code's, not ours
        if not _state_module:
            module = type(sys)("_codecage_state")
            exec(compile(req.get("code", ""), "<codecage-state>", "exec"), module.__dict__)
            sys.modules["_codecage_state"] = module
            _state_module.append(module)
        state = _state_module[0]
        if op == "warm":
            # A spare session, before anyone uses it: its first snapshot
            # or restore finds this file compiled and its modules loaded.
            return {"state": state.warm()}
        seconds = max(req.get("timeout_ms", 0), 1) / 1000
        if op == "snapshot":
            skip = lambda v: v is ToolError or getattr(type(v), "_codecage_tools", False)  # noqa: E731
            report = state.save(fd, contexts, seconds, skip)
        elif op == "restore":
            allowed = req.get("allowed_imports")

            def new_module():
                main = type(sys)("__main__")
                main.__dict__["__builtins__"] = builtins
                return main

            report = state.load(fd, contexts, seconds, lambda name: allowed is None or _permitted(allowed, name), new_module)
        else:
            return {"state_error": "unknown operation %s" % _clip(repr(op))[:100]}
        return {"state": report}
    except Exception as e:
        return {"state_error": _clip("%s" % (e,) if type(e).__name__ == "StateError" else "%s: %s" % (type(e).__name__, e))}
    finally:
        if fd >= 0:
            os.close(fd)


def _receive_fd(os, chan):
    # The supervisor sends one byte with the descriptor right after the
    # request's frame, which the harness read to its last byte: read(2)
    # would drop the descriptor, recvmsg takes it.
    import _socket

    sock = _socket.socket(fileno=os.dup(chan))
    try:
        _, ancillary, _, _ = sock.recvmsg(1, _socket.CMSG_SPACE(4), _socket.MSG_CMSG_CLOEXEC)
    finally:
        sock.close()
    fds = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, len(data) - len(data) % 4, 4)]
    for extra in fds[1:]:
        os.close(extra)
    if not fds:
        raise RuntimeError("the state request came without its pipe")
    return fds[0]


_calls = [0]
# One call at a time: code may call tools from several threads, and each
# call writes a frame and reads frames until its own answer, which another
# thread's read would otherwise take (and that call would wait forever).
_call_lock = _thread.allocate_lock()


def _supervisor_call(tool, args):
    # One call to the supervisor during a run (a frame out, its answer
    # in): an upstream tool (code mode), or a magic's "!shell" and "!pip",
    # which the service runs under its policy. Returns the tool_result.
    with _call_lock:
        return _call_once(tool, args)


def _call_once(tool, args):
    read_frame, write_frame = _channel
    _calls[0] += 1
    # Bounded by what the supervisor reads in one frame (MaxReplyBytes),
    # not less: whatever passes here, the supervisor judges (and audits)
    # itself, as it must a frame the code writes to the channel directly.
    try:
        frame = _Raw(_json({"tool_call": {"id": _calls[0], "tool": tool, "args": args}}, _MAX_REPLY))
    except _TooBig:
        raise ToolError("the call's arguments pass %d bytes" % _MAX_REPLY) from None
    write_frame(frame)
    while True:
        msg = read_frame()
        if msg is None:
            import os

            os._exit(0)  # the supervisor is gone
        res = msg.get("tool_result") if type(msg) is dict else None
        if res is not None and res.get("id") == _calls[0]:
            return res


class ToolError(Exception):
    """An upstream tool failed, or the call was refused; the message says why."""


def _tools_namespace(specs):
    # Code mode: tools.<server>.<tool>(**kwargs) and tools.call("s.t", {...}).
    # Each call is a frame to the supervisor, which holds the upstream
    # connections (and their credentials) and checks every call.
    def jsonable(v, depth=0):
        if depth > 64:
            return False
        if v is None or type(v) in (bool, int, float, str):
            return True
        if type(v) in (list, tuple):
            return all(jsonable(x, depth + 1) for x in v)
        if type(v) is dict:
            return all(type(k) is str and jsonable(x, depth + 1) for k, x in v.items())
        return False

    def call_tool(tool, args=None):
        """Call an upstream tool by its qualified name, "server.tool", with a dict of arguments."""
        if type(tool) is not str:
            raise TypeError("tools.call: the tool name must be a str such as 'server.tool'")
        if args is None:
            args = {}
        if type(args) is not dict or not jsonable(args):
            raise TypeError("tools.call: arguments must be a dict of JSON values (str, int, float, bool, None, list, dict)")
        res = _supervisor_call(tool, args)
        if not res.get("ok"):
            raise ToolError(res.get("error") or "the tool failed")
        value = res.get("value")
        if value is None:
            return None
        import json

        return json.loads(value)

    class Server:
        def __init__(self, name, fns):
            self.__dict__.update(fns)
            self._name = name

        def __repr__(self):
            names = sorted(k for k in self.__dict__ if not k.startswith("_"))
            return "<tools.%s: %s>" % (self._name, ", ".join(names))

    by_server = {}
    for spec in specs:
        by_server.setdefault(spec["server"], []).append(spec)

    class Tools:
        """Upstream MCP tools: tools.<server>.<tool>(...), or tools.call("server.tool", {...}). help() on a tool shows its signature."""

        _codecage_tools = True  # the harness's, given per request: no snapshot saves it
        call = staticmethod(call_tool)
        ToolError = ToolError

        def __getattr__(self, name):
            # A server's functions are built when the code first uses it:
            # most runs never touch tools, and inspect costs ~12 ms to load.
            if name not in by_server:
                raise AttributeError("no upstream server %r (servers: %s)" % (name, ", ".join(sorted(by_server))))
            server = Server(name, {spec["py"]: make(spec) for spec in by_server[name]})
            self.__dict__[name] = server
            return server

        def __dir__(self):
            return sorted(set(by_server) | {"call", "ToolError"})

        def __repr__(self):
            return "<tools: %s>" % ", ".join(sorted(by_server))

    def make(spec):
        import inspect

        qualified = spec["server"] + "." + spec["name"]
        params = spec["params"]
        parameters = []
        for p in params:
            if p["required"]:
                parameters.append(inspect.Parameter(p["py"], inspect.Parameter.POSITIONAL_OR_KEYWORD))
        for p in params:
            if not p["required"]:
                default = None
                if p["default"]:
                    import json

                    default = json.loads(p["default"])
                parameters.append(inspect.Parameter(p["py"], inspect.Parameter.KEYWORD_ONLY, default=default))
        sig = inspect.Signature(parameters)
        names = {p["py"]: p["name"] for p in params}

        def fn(*args, **kwargs):
            bound = sig.bind(*args, **kwargs)
            return call_tool(qualified, {names[k]: v for k, v in bound.arguments.items()})

        fn.__signature__ = sig
        fn.__name__ = fn.__qualname__ = spec["py"]
        fn.__doc__ = spec["doc"]
        return fn

    return Tools()


_USER_SITE = None  # a machine's user site, on sys.path (see _site_paths)


def _refresh_user_site():
    # A command's pip install may have made it since the import system
    # last found it missing (and cached that).
    if _USER_SITE and _USER_SITE in sys.path_importer_cache and sys.path_importer_cache[_USER_SITE] is None:
        del sys.path_importer_cache[_USER_SITE]


def _site_paths(os):
    # The interpreter runs with -S: site.py and the .pth files it executes
    # cost 7 ms of every run (more with each package installed). Add the
    # package directories it would have added, and its builtins.
    import builtins
    import _sitebuiltins

    v = "python%d.%d" % sys.version_info[:2]
    # A session's own packages (pip_install) come first, then its
    # environment's layer, then the operator's layer (codecage packages
    # install), then the system's.
    dirs = ["/opt/codecage/site", "/opt/codecage/env", "/opt/codecage/packages"]
    if os.environ.get("CODECAGE_USER_SITE"):
        # A machine's: what pip install put in its home from a command,
        # before the system's, as site.py orders them.
        global _USER_SITE
        _USER_SITE = os.path.join(os.path.expanduser("~"), ".local", "lib", v, "site-packages")
        sys.path.append(_USER_SITE)
    if sys.prefix == "/usr":  # Debian's layout
        dirs += ["/usr/local/lib/%s/dist-packages" % v, "/usr/lib/python3/dist-packages", "/usr/lib/%s/dist-packages" % v]
    else:
        dirs += [os.path.join(sys.prefix, "lib", v, "site-packages")]
    for d in dirs:
        if d not in sys.path and os.path.isdir(d):
            sys.path.append(d)
    eof = "Ctrl-D (i.e. EOF)"
    builtins.exit = _sitebuiltins.Quitter("exit", eof)
    builtins.quit = _sitebuiltins.Quitter("quit", eof)
    builtins.help = _sitebuiltins._Helper()


def _on_import(names, run):
    # Runs run(module, exec_module) in place of exec_module when a module
    # of names is first imported: the harness's one way of adjusting a
    # library as it loads, with nothing imported before the code does.
    import importlib.machinery

    class Loader:
        def __init__(self, inner):
            self.inner = inner

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            run(module, self.inner.exec_module)

    class Finder:
        @staticmethod
        def find_spec(name, path, target=None):
            if name not in names:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = Loader(spec.loader)
            return spec

    sys.meta_path.insert(0, Finder)


def _quiet_psutil():
    # The sandbox's /proc holds its processes alone (subset=pid). psutil
    # reads /proc/stat when it is imported (sklearn imports it through
    # joblib), copes without it, but prints a traceback: load its Linux
    # module with that message dropped. Nothing else is touched.
    def quietly(module, exec_module):
        import io

        saved, sys.stderr = sys.stderr, io.StringIO()
        try:
            exec_module(module)
        finally:
            sys.stderr = saved

    _on_import(("psutil._pslinux",), quietly)


# The current run's display outputs (display(), plt.show(), a PIL image
# shown), in order, when the run asked for display results (E2B's code
# interpreter); None otherwise, and then show() does what it did (nothing,
# in a jail without a display). _outputs_bytes is their size so far.
_outputs = None
_outputs_bytes = [0]
_result_limit = [65536]


def _hook_pil_show():
    # E2B's kernel shows a PIL image as a display result (PIL's IPython
    # viewer), and displays an image saved to a file name: a viewer first
    # in PIL's list and a wrapped Image.save, set when PIL.ImageShow and
    # PIL.Image are first imported (PIL is not imported before the code
    # does).
    class Viewer:
        @staticmethod
        def show(image, **options):
            if _outputs is None:
                return 0
            nb = _notebook()
            nb.emit(nb.image_bundle(image))
            return 1

    def saving(save):
        # E2B's hook: an image saved to a named file is displayed too.
        def wrapper(self, fp, format=None, **params):
            result = save(self, fp, format, **params)
            if _outputs is not None and isinstance(fp, str):
                nb = _notebook()
                nb.emit(nb.image_bundle(self))
            return result

        return wrapper

    def hooked(module, exec_module):
        exec_module(module)
        try:
            if module.__name__ == "PIL.ImageShow":
                module.register(Viewer, -1)
            else:
                module.Image.save = saving(module.Image.save)
        except Exception:
            pass  # another PIL: it keeps its own show() and save()

    _on_import(("PIL.ImageShow", "PIL.Image"), hooked)


_notebook_module = []


def _notebook():
    # notebook.py (the harness's _NOTEBOOK), compiled when a run first
    # needs it: a display, a figure shown, a magic.
    if not _notebook_module:
        module = type(sys)("_codecage_notebook")
        module.__dict__["_h"] = globals()
        exec(compile(_NOTEBOOK, "<codecage-notebook>", "exec"), module.__dict__)
        _notebook_module.append(module)
    return _notebook_module[0]


def _hook_notebook(builtins):
    # What a Jupyter kernel gives every cell: display() without an import,
    # the magics (cell.py makes each a __codecage_magic__ call), plt.show()
    # showing the figures as outputs, and IPython.display, from a small
    # module of ours when IPython is not installed.
    def display(*objs, **kwargs):
        """Display each object as a result of the cell (IPython's display)."""
        return _notebook().display(*objs, **kwargs)

    def __codecage_magic__(name, args, body=None):
        return _notebook().magic(name, args, body)

    builtins.display = display
    builtins.__codecage_magic__ = __codecage_magic__

    def pyplot(module, exec_module):
        exec_module(module)
        show = module.show

        def shown(*args, **kwargs):
            if _outputs is None:
                return show(*args, **kwargs)
            _notebook().show_figures()
            return None

        shown.__doc__ = show.__doc__
        module.show = shown

    _on_import(("matplotlib.pyplot",), pyplot)

    def hooked(module, exec_module):
        exec_module(module)
        if hasattr(module, "display"):
            module.display = display  # IPython's own, outside a kernel, only prints

    _on_import(("IPython.core.display_functions", "IPython.display"), hooked)
    sys.meta_path.append(_IPythonShim)


class _IPythonShim:
    # Last on the path: answers for IPython only when no IPython is
    # installed, with notebook.py's modules.
    @staticmethod
    def find_spec(name, path, target=None):
        if name.partition(".")[0] != "IPython" or not _ipython_shimmed():
            return None
        import importlib.machinery

        return importlib.machinery.ModuleSpec(name, _IPythonShim, is_package=name in ("IPython", "IPython.core"))

    @staticmethod
    def create_module(spec):
        module = _notebook().ipython_modules().get(spec.name)
        if module is None:
            raise ImportError("No module named %r (codecage's small IPython has only IPython.display)" % spec.name, name=spec.name)
        return module

    @staticmethod
    def exec_module(module):
        pass


_shim = []


def _ipython_shimmed():
    if not _shim:
        import importlib.machinery

        _shim.append(importlib.machinery.PathFinder.find_spec("IPython") is None)
    return _shim[0]


def _preload(os):
    # A warm sandbox imports the heavy modules of its class before any
    # request, so a run's "import numpy" finds them loaded.
    for name in filter(None, os.environ.get("CODECAGE_PRELOAD", "").split(",")):
        try:
            __import__(name)
        except Exception:
            pass


def _seed_matplotlib_cache(os):
    # matplotlib wants a writable config directory; the prebuilt font cache
    # is bound read-only, so data_science runs copy it into /tmp (38 KB)
    # instead of rebuilding it (most of a second).
    src = os.environ.get("CODECAGE_MPL_CACHE")
    dst = os.environ.get("MPLCONFIGDIR")
    if not src or not dst:
        return
    try:
        os.makedirs(dst, exist_ok=True)
        for name in os.listdir(src):
            with open(os.path.join(src, name), "rb") as f, open(os.path.join(dst, name), "wb") as g:
                g.write(f.read())
    except OSError:
        pass  # matplotlib rebuilds the cache itself, slowly


def _run(req, builtins, real_import, main):
    global _outputs
    _refresh_user_site()
    code = _cell_code(req.get("code", ""))
    filename = "<code>"
    module_type = type(sys)
    g = main.__dict__
    sys.modules["__main__"] = main
    allowed = req.get("allowed_imports")
    if allowed is not None:
        _install_import_policy(builtins, real_import, g, set(allowed), req)
    else:
        builtins.__import__ = real_import
    reply = {"result": None, "result_type": None, "variables": [], "error": None, "exit_code": 0, "images": []}
    if req.get("capture_plots"):
        _quiet_agg_show()
    _outputs = [] if req.get("display") else None
    _outputs_bytes[0] = 0
    _result_limit[0] = req.get("max_result_bytes", 65536)
    if req.get("tools"):
        g["tools"] = _tools_namespace(req["tools"])
        g["ToolError"] = ToolError
    try:
        import _ast

        try:
            tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)
        except (SyntaxError, ValueError) as e:
            reply["error"] = _syntax_error(e, code, filename)
            reply["exit_code"] = 1
            return reply
        last = None
        if tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = _ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), g)
        if last is not None:
            value = eval(compile(last, filename, "eval"), g)
            if value is not None:
                reply["result"], reply["result_type"] = _encode_result(value, req.get("max_result_bytes", 65536))
                if req.get("display"):
                    reply["display"] = _display(value, req.get("max_result_bytes", 65536))
    except SystemExit as e:
        reply["exit_code"] = _exit_code(e)
    except BaseException as e:  # noqa: B036 - everything the code raises is reported
        reply["error"] = _exception(e, code, filename)
        reply["exit_code"] = 1
    if _outputs is not None:
        # A notebook's figures still open show after the result, as the
        # inline backend's flush does; they are outputs, not images.
        if req.get("capture_plots") and "matplotlib.pyplot" in sys.modules:
            _notebook().show_figures(after=True)
        reply["outputs"] = [o for o in _outputs if o is not None]
    elif req.get("capture_plots"):
        reply["images"] = _figures()
    _outputs = None
    names = [k for k, v in list(g.items()) if type(k) is str and not k.startswith("_") and len(k) <= _MAX_NAME and not isinstance(v, module_type) and not (req.get("tools") and k in ("tools", "ToolError"))]
    reply["variables"] = names[:_MAX_VARIABLES]
    return reply


def _install_import_policy(builtins, real_import, user_globals, allowed, req):
    profile = req.get("profile") or "the current policy"
    hints = req.get("import_hints") or {}
    allowed = tuple(allowed)

    def check(name):
        if _permitted(allowed, name):
            return
        if name.partition(".")[0] == "IPython" and _ipython_shimmed():
            return  # codecage's own IPython.display, not a library
        msg = "Import of '%s' is not allowed in profile %s" % (name, profile)
        hint = hints.get(name) or hints.get(name.partition(".")[0]) or hints.get("*")
        if hint:
            msg += "; " + hint
        raise ImportError(msg, name=name)

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level != 0:
            return real_import(name, globals, locals, fromlist, level)
        if globals is None:
            globals = sys._getframe(1).f_globals
        from_user = globals is user_globals
        if from_user:
            check(name)
        module = real_import(name, globals, locals, fromlist, level)
        if from_user and fromlist and hasattr(module, "__path__"):
            # "from pkg import sub" loads pkg.sub as a module: the user asked
            # for it as surely as "import pkg.sub".
            for item in fromlist:
                sub = getattr(module, item, None) if item != "*" else None
                if type(sub) is type(sys) and getattr(sub, "__name__", "") == name + "." + item:
                    check(sub.__name__)
        return module

    builtins.__import__ = guarded_import
    import importlib

    real_import_module = importlib.import_module

    def import_module(name, package=None):
        if not name.startswith(".") and sys._getframe(1).f_globals is user_globals:
            check(name)
        return real_import_module(name, package)

    importlib.import_module = import_module


def _permitted(allowed, name):
    # Same rule as policy.Allows: an entry allows itself, its submodules
    # and the packages above it ("urllib.parse" lets "urllib" load).
    for a in allowed:
        if name == a or name.startswith(a + ".") or a.startswith(name + "."):
            return True
    return False


def _quiet_agg_show():
    # plt.show() under the Agg backend only warns that it cannot show; the
    # figures come back as images instead, so the warning is noise. A
    # showwarning wrapper, not filterwarnings, which would import re.
    import warnings

    show = warnings.showwarning
    if getattr(show, "_codecage", False):
        return

    def quiet(message, category, filename, lineno, file=None, line=None):
        if "non-interactive" in str(message) and "cannot be shown" in str(message):
            return
        show(message, category, filename, lineno, file, line)

    quiet._codecage = True
    warnings.showwarning = quiet


# Bounds on returned figures, all together: enough for any chart, and the
# reply stays under the supervisor's frame limit (MaxReplyBytes).
_MAX_FIGURES = 10
_MAX_IMAGE_BYTES = 4 << 20


def _figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    import base64
    import io

    images = []
    budget = _MAX_IMAGE_BYTES
    try:
        nums = plt.get_fignums()
        if len(nums) > _MAX_FIGURES:
            # Said as the figures over the size budget are: never silently.
            extra = nums[_MAX_FIGURES:]
            named = ", ".join(str(n) for n in extra[:10]) + (", ..." if len(extra) > 10 else "")
            print("codecage: %d figures left out (%s): at most %d are returned" % (len(extra), named, _MAX_FIGURES), file=sys.stderr)
        for num in nums[:_MAX_FIGURES]:
            buf = io.BytesIO()
            plt.figure(num).savefig(buf, format="png")
            data = buf.getvalue()
            budget -= len(data)
            if budget < 0:
                print("codecage: figure %d left out: the figures exceed %d bytes" % (num, _MAX_IMAGE_BYTES), file=sys.stderr)
                continue
            images.append({"mime_type": "image/png", "data": base64.b64encode(data).decode("ascii")})
        plt.close("all")
    except Exception as e:  # a broken figure must not lose the run's result
        print("codecage: could not render a figure: %s" % e, file=sys.stderr)
    return images


def _encode_result(value, limit):
    # The value as JSON when it is JSON and fits, else its repr, cut.
    try:
        return _Raw(_json(value, limit)), _name(value)
    except Exception:  # _TooBig, or not JSON
        pass
    return _repr(value, limit), _name(value)


# The rich representations a notebook shows for a value, by MIME type.
_REPR_METHODS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/pdf", "_repr_pdf_"),
    ("text/latex", "_repr_latex_"),
    ("application/json", "_repr_json_"),
    ("application/javascript", "_repr_javascript_"),
)


def _display(value, limit):
    # A mime bundle like IPython's: repr as text/plain, and what the value's
    # _repr_*_ methods give. Each is left out when it fails or is too big,
    # known before it is encoded.
    out = {"text/plain": _repr(value, limit)}
    if type(value) in (dict, list):
        # E2B's kernel gives a plain dict or list as JSON too.
        try:
            out["application/json"] = _json(value, limit)
        except Exception:
            pass
    elif type(value).__module__.partition(".")[0] in ("pandas", "matplotlib"):
        try:
            _notebook().extra_formats(value, out)
        except Exception:
            pass
    for mime, name in _REPR_METHODS:
        method = getattr(type(value), name, None)  # the type's: an object's __getattr__ would answer anything
        if not callable(method):
            continue
        cap = _MAX_IMAGE_BYTES // 4 if mime.startswith("image/") or mime == "application/pdf" else limit
        try:
            data = method(value)
            if isinstance(data, tuple):
                data = data[0]  # (data, metadata)
            if data is None:
                continue
            if isinstance(data, (bytes, bytearray)):
                if (len(data) + 2) // 3 * 4 > cap:
                    continue  # its base64, before it is made
                import base64

                data = base64.b64encode(data).decode("ascii")
            elif isinstance(data, str):
                if len(data) > cap:
                    continue
                data = str.__str__(data)  # a str subclass (markupsafe's Markup) as a plain str
            else:
                data = _json(data, cap)
        except Exception:
            continue
        if len(data) <= cap:
            out[mime] = data
    return out


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _syntax_error(e, code, filename):
    import traceback

    _register_source(code, filename)
    if isinstance(e, SyntaxError):
        return {
            "type": _name(e),
            "message": _clip(str(e.msg)),
            "line": e.lineno,
            "column": e.offset,
            "traceback": _clip("".join(traceback.format_exception_only(type(e), e))),
        }
    return {"type": "SyntaxError", "message": _clip(str(e)), "line": None, "column": None, "traceback": _clip(str(e))}


def _exception(e, code, filename):
    import traceback

    _register_source(code, filename)
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == filename]
    text = ""
    if frames:
        text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(e), e))
    line = frames[-1].lineno if frames else None
    try:
        message = str(e)
    except Exception:
        message = "<unprintable>"
    return {
        "type": _name(e),
        "message": _clip(message),
        "line": line,
        "column": None,
        "traceback": _clip(text),
    }


# Bounds on what a reply carries besides the result (which has its own).
_MAX_VARIABLES = 1000
_MAX_TEXT = 64 << 10
# The supervisor's frame limit (runtime.MaxReplyBytes).
_MAX_REPLY = 8 << 20


def _clip(text):
    if len(text) > _MAX_TEXT:
        return text[:_MAX_TEXT] + "... [truncated]"
    return text


def _register_source(code, filename):
    # Tracebacks read source lines through linecache; imported only when a
    # run fails.
    import linecache

    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)


class _Raw:
    """JSON text already encoded, embedded as is (held, not copied as a
    str subclass would be)."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text


# ---- encoders: JSON for the reply and a value that is JSON, repr for one
# that is not. Each knows its limit before it builds: a string, a number
# or a container that cannot fit what is left is refused (JSON) or cut
# (repr) on a lower bound of its size, before its text is made, so a big
# value costs its own memory once, not again per character. Runs of plain
# scalars are encoded in C (json's own encoder, repr of a slice) when an
# upper bound on their text keeps that work within a few times the limit.


class _TooBig(Exception):
    """The text would pass its limit: raised before the rest is made."""


# Items of a list encoded in C at once, and how much more than what is
# left such a run may make before it is measured.
_CHUNK = 1024
_SLACK = 8
# A container of at most this many items is encoded item by item, never
# measured first: in a cell (a fork of the zygote) every page the encoder
# first writes is copied, and measuring a run's small reply and loading
# the C encoder for it cost ~90 page faults per run, more than they save.
_SMALL = 64

# [encode_basestring, a compact strict encoder or None, and what _bound
# uses: functools.partial, itertools.chain, operator.is_not], loaded once
# (by the zygote for its cells, before they fork).
_c_json = []


def _c_encoders():
    if not _c_json:
        from functools import partial
        from itertools import chain
        from operator import is_not

        # _json is C in every CPython; json itself would import re (15 ms).
        try:
            import _json

            esc = _json.encode_basestring
            enc = _json.make_encoder(None, _not_json, esc, None, ":", ",", False, False, False)
            if enc([1, "a"], 0)[0] != '[1,"a"]':
                enc = None
        except Exception:
            esc, enc = _py_basestring, None
        _c_json[:] = [esc, enc, partial, chain, is_not]
    return _c_json


def _not_json(o):
    raise TypeError(type(o).__name__)


_ESCAPES = {i: "\\u%04x" % i for i in range(32)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord("\b"): "\\b", ord("\f"): "\\f"})


def _py_basestring(s):
    return '"' + s.translate(_ESCAPES) + '"'


def _json_str(s):
    # A short plain string needs no escaping (checked in C, without a copy).
    # Lone surrogates pass as they are: write_frame escapes them.
    if len(s) < 256 and s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return '"' + s + '"'
    return _c_encoders()[0](s)


# What _bound measures: plain values, whose text C makes exactly as the
# encoders would (JSON: json's encoder; repr: repr itself).
_JSON_KINDS = frozenset((str, int, float, bool, type(None), list, tuple, dict))
_REPR_KINDS = _JSON_KINDS | {bytes, set, frozenset}
_STR = frozenset((str,))
_NUMBERS = frozenset((int, float, bool))
_NONE = frozenset((type(None),))


def _bound(v, budget, for_json, levels=101):
    """An upper bound on the length of v's text (JSON, or repr) when v is
    made of plain values only, nested at most levels deep, else None; raises _TooBig once a lower
    bound passes budget, so its work stays within the limit too. It goes
    a level of nesting at a time, in C: the types of a level's items,
    the sum of their lengths, the largest number, the next level's items
    chained."""
    partial, chain, is_not = _c_encoders()[2:]
    ok = _JSON_KINDS if for_json else _REPR_KINDS
    per_char = 6 if for_json else 10  # \u001f; \U0001f600
    lower = ub = 0
    level = [v]
    for _ in range(levels):  # a cycle, for repr, ends here too
        if not level:
            return ub
        kinds = set(map(type, level))
        if not kinds <= ok:
            return None
        if type(None) in kinds:
            n = level.count(None)
            lower, ub = lower + n, ub + 5 * n  # 'None,'
            kinds -= _NONE
            if kinds:
                level = list(filter(partial(is_not, None), level))
        if kinds <= _NUMBERS or len(kinds) == 1:
            groups = [(kinds, level)] if kinds else []
        else:
            groups = [({k}, [x for x in level if type(x) is k]) for k in kinds]
        nxt = []
        for ks, some in groups:
            k = next(iter(ks))
            if ks <= _NUMBERS:
                # The largest magnitude bounds every number's digits (max
                # skips a NaN but a first one: then item by item).
                big = max(map(abs, some))
                if big != big:
                    return None
                if type(big) is float:
                    per = 26 if big < 1e16 else 330
                else:
                    bits = big.bit_length()
                    lower += bits * 3 // 10  # the largest one's digits
                    per = max(bits * 31 // 100 + 4, 26 if float in ks else 7)
                lower += len(some)
                ub += per * len(some)
            elif k is str or k is bytes:
                total = sum(map(len, some))
                lower += total + len(some)
                ub += per_char * total + 4 * len(some)
            else:
                n = sum(map(len, some))
                lower += 2 * n + len(some)  # a character and a separator each
                ub += 4 * n + 13 * len(some)  # separators, brackets, "(1,)", "frozenset({})"
                if lower > budget:
                    raise _TooBig()
                if k is dict:
                    keys = list(chain.from_iterable(some))
                    if set(map(type, keys)) <= _STR:
                        # Measured here: mixed in with the values, they
                        # would split the next level by kind.
                        total = sum(map(len, keys))
                        lower += total
                        ub += per_char * total + 4 * len(keys)
                    elif for_json:
                        return None
                    else:
                        nxt += keys
                    nxt += chain.from_iterable(map(dict.values, some))
                else:
                    nxt += chain.from_iterable(some)
            if lower > budget:
                raise _TooBig()
        level = nxt
    return None


def _json(v, limit=None):
    """Encodes v as strict JSON (no NaN, string keys only), or raises:
    _TooBig once the text would pass limit, before the rest is made."""
    parts = []
    append = parts.append
    left = [sys.maxsize if limit is None else limit]

    def put(text):
        n = left[0] - len(text)
        if n < 0:
            raise _TooBig()
        left[0] = n
        append(text)

    def enc(v, depth):
        t = type(v)
        if t is str:
            if len(v) + 2 > left[0]:
                raise _TooBig()  # before it is escaped
            put(_json_str(v))
        elif t is int:
            if v.bit_length() * 3 // 10 > left[0]:
                raise _TooBig()  # its digits, before they are made
            put(int.__repr__(v))
        elif v is None:
            put("null")
        elif v is True:
            put("true")
        elif v is False:
            put("false")
        elif t is float:
            if v != v or v in (float("inf"), float("-inf")):
                raise ValueError("not finite")
            put(float.__repr__(v))
        elif t is list or t is tuple or t is dict:
            if depth > 100:
                raise ValueError("too deep")
            cenc = _c_encoders()[1] if len(v) > _SMALL else None
            if cenc is not None:
                # Made of plain values, within a few times what is left:
                # encoded whole, in C.
                ub = _bound(v, left[0], True, 101 - depth)
                if ub is not None and ub <= _SLACK * left[0] + 4096:
                    put("".join(cenc(v, 0)))
                    return
            if t is dict:
                put("{")
                for i, (k, x) in enumerate(v.items()):
                    if type(k) is not str:
                        raise TypeError("non-string key")
                    if i:
                        put(",")
                    enc(k, depth)
                    put(":")
                    enc(x, depth + 1)
                put("}")
                return
            if 2 * len(v) + 1 > left[0]:
                raise _TooBig()  # a character and a comma each, at least
            put("[")
            for i, x in enumerate(v):
                if i:
                    put(",")
                enc(x, depth + 1)
            put("]")
        elif t is _Raw:
            put(v.text)
        else:
            raise TypeError(t.__name__)

    try:
        enc(v, 0)
        return "".join(parts)
    finally:
        # enc calls itself: a cycle, which would keep parts (the text)
        # until the next collection.
        enc = None


def _repr_head(v, n):
    # The start of repr(v), at least n characters, for a str or bytes of
    # more than n items, made from its first n: repr quotes with " when v
    # has a ' and no " (which its slice alone may not), so the slice ends
    # with a quote that keeps v's choice, cut off with the closing one.
    sq, dq = ("'", '"') if type(v) is str else (b"'", b'"')
    return repr(v[:n] + (sq if sq in v and dq not in v else dq))[:-2]


_TRUNCATED = "... [truncated]"


def _repr(value, limit):
    """repr(value), or its first limit characters and "... [truncated]".
    Only what fits is made: a str's or bytes' repr from a slice, a
    container's items until the limit (the whole repr of a big value
    would cost as much memory again)."""
    t = type(value)
    if t is float or t is bool or value is None or (t is int and value.bit_length() <= 256) or (t is str and len(value) <= limit // 10):
        # Short text, made as is: the general path below (four closures
        # and a set) costs a cell, a fork of the zygote, page copies.
        text = repr(value)
        return text if len(text) <= limit else text[:limit] + _TRUNCATED
    parts = []
    left = [limit + 1]  # one more than the limit: whether it passes

    def put(text):
        if len(text) >= left[0]:
            parts.append(text[:left[0]])
            raise _TooBig()
        left[0] -= len(text)
        parts.append(text)

    def whole(v, inner=False):
        # repr(v) in C (inner: without its brackets), when v is plain and
        # its text cannot be much more than what is left.
        if len(v) <= _SMALL:
            return False
        try:
            ub = _bound(v, left[0], False)
        except _TooBig:
            return False  # item by item: its first characters are wanted
        if ub is None or ub > _SLACK * left[0] + 4096:
            return False
        put(repr(v)[1:-1] if inner else repr(v))
        return True

    def items(seq, n, depth, active):
        # seq(start, stop): a plain list of the items in that range, taken
        # a run at a time, each run whole when it can be.
        for start in range(0, n, _CHUNK):
            run = seq(start, start + _CHUNK)
            if start:
                put(", ")
            if whole(run, True):
                continue
            for i, x in enumerate(run):
                if i:
                    put(", ")
                rep(x, depth + 1, active)

    def rep(v, depth, active):
        t = type(v)
        r = t.__repr__
        if t is str or t is bytes:
            if len(v) >= left[0]:
                put(_repr_head(v, left[0]))
            put(r(v))
        elif t is bytearray:
            if len(v) >= left[0]:
                # As _repr_head; its repr escapes ' whatever the quotes.
                dq = b"'" in v and b'"' not in v
                put(bytearray.__repr__(v[:left[0]] + (b"'" if dq else b'"'))[:-4 if dq else -3])
            put(bytearray.__repr__(v))
        elif r is list.__repr__ or r is tuple.__repr__ or r is dict.__repr__ or t is set or t is frozenset:
            if id(v) in active:
                put("[...]" if r is list.__repr__ else "{...}" if r is dict.__repr__ else "(...)" if r is tuple.__repr__ else t.__name__ + "(...)")
                return
            if t in _REPR_KINDS and whole(v):
                return
            active.add(id(v))
            try:
                if r is list.__repr__:
                    put("[")
                    items(lambda a, b: list.__getitem__(v, slice(a, b)), list.__len__(v), depth, active)
                    put("]")
                elif r is tuple.__repr__:
                    n = tuple.__len__(v)
                    put("(")
                    items(lambda a, b: list(tuple.__getitem__(v, slice(a, b))), n, depth, active)
                    put(",)" if n == 1 else ")")
                elif r is dict.__repr__:
                    put("{")
                    for i, (k, x) in enumerate(dict.items(v)):
                        if i:
                            put(", ")
                        rep(k, depth + 1, active)
                        put(": ")
                        rep(x, depth + 1, active)
                    put("}")
                elif not v:
                    put(t.__name__ + "()")
                else:
                    put("{" if t is set else "frozenset({")
                    for i, x in enumerate(v):
                        if i:
                            put(", ")
                        rep(x, depth + 1, active)
                    put("}" if t is set else "})")
            finally:
                active.discard(id(v))
        else:
            put(repr(v))  # its own repr, cut to what is left

    try:
        rep(value, 0, set())
    except _TooBig:
        return "".join(parts)[:limit] + _TRUNCATED
    except Exception as e:  # a broken __repr__ must not lose the run
        try:
            why = str(e)
        except Exception:
            why = "?"
        text = "<unrepresentable %s: %s>" % (_name(value), why[:1000])
        return text if len(text) <= limit else text[:limit] + _TRUNCATED
    finally:
        rep = None  # as in _json: no cycle holds the text
    return "".join(parts)


# Longest type name a reply carries (the code names its classes).
_MAX_NAME = 200


def _name(value):
    name = type(value).__name__
    return name if len(name) <= _MAX_NAME else name[:_MAX_NAME] + _TRUNCATED

_harness()
