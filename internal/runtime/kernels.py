# Kernels besides Python (part of the harness): a context whose language is
# javascript, typescript or bash runs its code in a long-lived process of
# its own, a child of the harness in the same sandbox: node running
# kernel.js, or bash reading cells. The harness starts it on the context's
# first request, forwards each request to it over two pipes (fd 3 in, fd 4
# out, in the kernel) and answers the supervisor as for Python; the
# kernel's output goes straight to the sandbox's stdout and stderr, so it
# streams. A kernel that outlives the request's time limit is killed (its
# variables are lost) and the next request starts a fresh one.

_KERNEL_FAMILY = {"javascript": "node", "typescript": "node", "bash": "bash"}

_NODE = "/usr/bin/node"
_BASH = "/bin/bash"

# Reads a cell's file name a line on fd 3, sources it in this shell (its
# variables and directory stay) without the kernel's pipes, and answers its
# status on fd 4.
_BASH_DRIVER = (
    'while IFS= read -r -u 3 __codecage_cell; do '
    'source "$__codecage_cell" 3<&- 4>&- </dev/null; '
    "printf '%s\\n' \"$?\" >&4; "
    "done"
)

# Running kernels by (context, family): [pid, write fd, read fd, buffer, dir].
_kernels = {}
# The directory each context's kernel starts in (again, after a restart).
_kernel_cwd = {}


def _kernel_reply(error=None, display=None, limit=65536):
    reply = {"result": None, "result_type": None, "variables": [], "error": error, "exit_code": 1 if error else 0, "images": []}
    if display:
        text = display.get("text/plain", "")
        reply["result"] = _Raw(_json_str(text[:limit]))
        reply["result_type"] = "str"
        reply["display"] = display
    return reply


def _kernel_stop(key):
    import os
    import signal

    k = _kernels.pop(key, None)
    if k is None:
        return None
    for fd in (k[1], k[2]):
        try:
            os.close(fd)
        except OSError:
            pass
    try:
        os.killpg(k[0], signal.SIGKILL)
    except OSError:
        pass
    try:
        _, status = os.waitpid(k[0], 0)
        return os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        return None


def _kernel_start(key, language, cwd):
    import os

    family = _KERNEL_FAMILY[language]
    if family == "node":
        argv = [_NODE, "--expose-internals", "--v8-pool-size=2", "--stack-size=900", "-e", _KERNEL_JS]
    else:
        argv = [_BASH, "--noprofile", "--norc", "-c", _BASH_DRIVER]
    if not os.path.exists(argv[0]):
        raise RuntimeError("%s is not installed in this sandbox (the %s kernel needs it)" % (argv[0], language))
    if cwd and not os.path.isdir(cwd):
        raise RuntimeError("the %s kernel cannot start in %s: no such directory" % (language, _clip(cwd)[:200]))
    env = dict(os.environ)
    # libuv falls back from io_uring, which the jail refuses, on its own;
    # this spares it the attempt.
    env["UV_USE_IO_URING"] = "0"
    to_kernel = os.pipe()
    from_kernel = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()  # one process group: a kill ends the kernel's children too
            if cwd:
                os.chdir(cwd)
            os.dup2(to_kernel[0], 3)
            if from_kernel[1] != 4:
                os.dup2(from_kernel[1], 4)
            else:
                os.set_inheritable(4, True)
            os.closerange(5, 4096)
            os.execve(argv[0], argv, env)
        except BaseException as e:  # noqa: B036 - the child must never return
            try:
                os.write(2, ("codecage: the %s kernel could not start: %s\n" % (language, e)).encode())
            finally:
                os._exit(127)
    os.close(to_kernel[0])
    os.close(from_kernel[1])
    tmp = None
    if family == "bash":
        import tempfile

        tmp = tempfile.mkdtemp(prefix=".codecage-bash-")
    _kernels[key] = [pid, to_kernel[1], from_kernel[0], b"", tmp]
    return _kernels[key]


def _kernel_line(k, deadline):
    # The kernel's next answer line, or None at the deadline or its end.
    import os
    import select
    import time

    while b"\n" not in k[3]:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([k[2]], [], [], left)
        if not ready:
            continue
        chunk = os.read(k[2], 65536)
        if not chunk:
            return None
        k[3] += chunk
        if len(k[3]) > 16 << 20:
            return None
    line, _, k[3] = k[3].partition(b"\n")
    return line.decode("utf-8", "replace")


def _kernel_send(k, text):
    import os

    data = text.encode("utf-8", "surrogatepass")
    while data:
        data = data[os.write(k[1], data):]


def _bash_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def _kernel_run(req):
    import os
    import time

    language = req.get("language")
    family = _KERNEL_FAMILY.get(language)
    if family is None:
        return _kernel_reply({"type": "KernelError", "message": "no kernel for language %s" % _clip(repr(language))[:100], "traceback": ""})
    name = req.get("context", "")
    key = (name, family)
    if req.get("new_context"):
        _kernel_stop(key)
        _kernel_cwd[key] = req.get("cwd")
        if not req.get("cwd") and not req.get("code"):
            # A context removed: its kernel goes, none starts in its place.
            _kernel_cwd.pop(key, None)
            return _kernel_reply()
    limit = req.get("max_result_bytes", 65536)
    seconds = req.get("timeout_ms", 0) / 1000 or 3600
    deadline = time.monotonic() + seconds
    k = _kernels.get(key)
    try:
        if k is None:
            k = _kernel_start(key, language, _kernel_cwd.get(key) or req.get("cwd"))
    except Exception as e:
        return _kernel_reply({"type": "KernelError", "message": _clip(str(e)), "traceback": ""})
    env = req.get("env") or {}
    code = _dedent(req.get("code", ""))
    try:
        if family == "node":
            import json

            _kernel_send(k, json.dumps({"code": code, "lang": language, "env": env}) + "\n")
            line = _kernel_line(k, deadline)
            answer = json.loads(line) if line is not None else None
        else:
            answer = _bash_cell(k, code, env, deadline)
    except (OSError, ValueError):
        answer = None
    if answer is None:
        timed_out = time.monotonic() >= deadline
        status = _kernel_stop(key)
        if timed_out:
            message = "the %s kernel ran past the time limit of %g s and was stopped: its variables are lost, the next run starts a fresh one" % (language, seconds)
            return _kernel_reply({"type": "TimeoutError", "message": message, "traceback": message})
        message = "Context was restarted: the %s kernel ended (status %s); its variables are lost, the next run starts a fresh one" % (language, status)
        return _kernel_reply({"type": "ContextRestarting", "message": message, "traceback": message})
    if family == "bash":
        if answer:
            # As E2B's bash kernel reports a failed last command: no name,
            # the exit status as the value.
            return _kernel_reply({"type": "", "message": str(answer), "traceback": ""})
        return _kernel_reply()
    error = answer.get("error")
    if error:
        return _kernel_reply({"type": _clip(str(error.get("name", ""))), "message": _clip(str(error.get("message", ""))), "traceback": _clip(str(error.get("traceback", "")))})
    display = answer.get("display")
    if display and not req.get("display"):
        display = {"text/plain": display.get("text/plain", "")}
    return _kernel_reply(display=_kernel_display(display) if display else None, limit=limit)


def _kernel_display(display):
    # The kernel's bundle, bounded as a Python value's is: each format's
    # name and text clipped, all of them within half a reply.
    out, size = {}, 0
    for m, v in display.items():
        m, v = str(m), _clip(str(v))
        if len(m) > _MAX_NAME or size + len(v) > _MAX_REPLY // 2:
            continue
        out[m] = v
        size += len(v)
    return out


def _bash_cell(k, code, env, deadline):
    # Runs one cell (and the restore of its variables) in the bash kernel:
    # its exit status, or None.
    import os

    prefix = "".join("export %s=%s\n" % (n, _bash_quote(v)) for n, v in env.items() if n.isidentifier())
    path = os.path.join(k[4], "cell")
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(prefix + code + "\n")
    _kernel_send(k, path + "\n")
    line = _kernel_line(k, deadline)
    if line is None:
        return None
    if env:
        restore = []
        for n in env:
            if not n.isidentifier():
                continue
            old = os.environ.get(n)
            restore.append("unset %s" % n if old is None else "export %s=%s" % (n, _bash_quote(old)))
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n".join(restore) + "\n")
        _kernel_send(k, path + "\n")
        if _kernel_line(k, deadline) is None:
            return None
    try:
        return int(line.strip() or "0")
    except ValueError:
        return 1
