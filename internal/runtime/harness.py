# codecage harness: runs inside the jail as `python3 -I -B -X utf8 -c <this>`.
# It reads requests from fd 3 (4-byte big-endian length + JSON), runs each
# request's code as __main__ and answers with one frame. The jail, not this
# file, is the security boundary: the import policy here is a convenience.
import sys


def _harness():
    import builtins
    import json
    import os
    import types

    chan = 3
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
        return None if body is None else json.loads(body)

    def write_frame(obj):
        body = json.dumps(obj, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")
        data = len(body).to_bytes(4, "big") + body
        while data:
            data = data[os.write(chan, data):]

    for stream in (sys.stdout, sys.stderr):
        # Line buffering: a run killed at its limit still shows what it printed.
        stream.reconfigure(line_buffering=True, errors="surrogateescape")

    real_import = builtins.__import__

    while True:
        req = read_frame()
        if req is None:
            os._exit(0)
        reply = _run(req, builtins, real_import, types, json)
        if os.getpid() != pid:
            # A process the code forked fell off the end of the code: it must
            # not answer for the harness.
            os._exit(0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        write_frame(reply)
        if not req.get("keep_alive"):
            os._exit(0)


def _run(req, builtins, real_import, types, json):
    code = req.get("code", "")
    filename = "<code>"
    main = types.ModuleType("__main__")
    g = main.__dict__
    g["__builtins__"] = builtins
    sys.modules["__main__"] = main
    allowed = req.get("allowed_imports")
    if allowed is not None:
        _install_import_policy(builtins, real_import, g, set(allowed), req)
    else:
        builtins.__import__ = real_import
    reply = {"result": None, "result_type": None, "variables": [], "error": None, "exit_code": 0}
    try:
        import ast
        import linecache

        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename=filename, mode="exec")
        except (SyntaxError, ValueError) as e:
            reply["error"] = _syntax_error(e)
            reply["exit_code"] = 1
            return reply
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), g)
        if last is not None:
            value = eval(compile(last, filename, "eval"), g)
            if value is not None:
                reply["result"], reply["result_type"] = _encode_result(value, json, req.get("max_result_bytes", 65536))
    except SystemExit as e:
        reply["exit_code"] = _exit_code(e)
    except BaseException as e:  # noqa: B036 - everything the code raises is reported
        reply["error"] = _exception(e, filename)
        reply["exit_code"] = 1
    reply["variables"] = [
        k for k, v in list(g.items()) if not k.startswith("_") and not isinstance(v, types.ModuleType)
    ]
    return reply


def _install_import_policy(builtins, real_import, user_globals, allowed, req):
    profile = req.get("profile") or "the current policy"
    hints = req.get("import_hints") or {}

    def check(name, from_user):
        top = name.partition(".")[0]
        if from_user and top and top not in allowed:
            msg = "Import of '%s' is not allowed in profile %s" % (top, profile)
            hint = hints.get(top)
            if hint:
                msg += "; " + hint
            raise ImportError(msg, name=top)

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            if globals is None:
                globals = sys._getframe(1).f_globals
            check(name, globals is user_globals)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = guarded_import
    import importlib

    real_import_module = importlib.import_module

    def import_module(name, package=None):
        if not name.startswith("."):
            check(name, sys._getframe(1).f_globals is user_globals)
        return real_import_module(name, package)

    importlib.import_module = import_module


def _encode_result(value, json, limit):
    kind = type(value).__name__
    try:
        text = json.dumps(value, allow_nan=False)
        if len(text) <= limit:
            return value, kind
    except Exception:
        pass
    try:
        text = repr(value)
    except Exception as e:  # a broken __repr__ must not lose the run
        text = "<unrepresentable %s: %s>" % (kind, e)
    if len(text) > limit:
        text = text[:limit] + "... [truncated]"
    return text, kind


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _syntax_error(e):
    import traceback

    if isinstance(e, SyntaxError):
        return {
            "type": type(e).__name__,
            "message": e.msg,
            "line": e.lineno,
            "column": e.offset,
            "traceback": "".join(traceback.format_exception_only(type(e), e)),
        }
    return {"type": "SyntaxError", "message": str(e), "line": None, "column": None, "traceback": str(e)}


def _exception(e, filename):
    import traceback

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
    return {"type": type(e).__name__, "message": message, "line": line, "column": None, "traceback": text}


_harness()
