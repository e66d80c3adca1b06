# codecage session state (#26): saves the globals of every context of a
# kept-alive harness, and loads them into a fresh one. The harness runs this
# file as module _codecage_state on the first state request (the supervisor
# sends it as the request's code). It runs inside the sandbox: the bytes it
# reads were written by code of the sandbox's owner and are only ever
# unpickled here, never by the supervisor, which treats them as opaque.
#
# The bytes travel in a pipe the supervisor passes with the request. Format:
#   MAGIC, then records: kind (1 byte), three strings (2-byte big-endian
#   length + UTF-8 each), then for a value its pickle in chunks (4-byte
#   big-endian length + bytes), ended by an empty chunk, or by ABANDONED and
#   the reason when the value could not be pickled (after part of it, maybe).
#   Kinds: CONTEXT (name, cwd, ""), MODULE (context, global, module name),
#   VALUE (context, global, type name), END ("", "", count of globals).
# Values share one pickler, so two globals naming one object still do after
# a restore. The pickle memo numbers objects implicitly (protocol 5): a
# value that fails on either side leaves the two memos out of step, so
# after a value that could not be saved both sides start a new pickler
# (the ABANDONED mark says so: globals on either side of it no longer share
# objects), and after a value that fails to load, the
# values the same pickler wrote after it are not loaded (they may refer to
# its objects, whose numbers are lost): they are reported, never wrong.
import os
import sys

MAGIC = b"codecage-state 1\n"
CONTEXT, MODULE, VALUE, END = b"C", b"M", b"V", b"E"
ABANDONED = 0xFFFFFFFF
CHUNK = 1 << 20  # the largest chunk written; larger writes are split

# A report lists this many globals (and as many lost ones); the rest are
# counted. Names, types and reasons are clipped: the code chose them.
MAX_LISTED = 1000
MAX_NAME = 200
MAX_REASON = 300

# Names every context's module has of its own, not the user's.
_MODULE_NAMES = frozenset(("__builtins__", "__name__", "__doc__", "__package__", "__loader__", "__spec__"))

# The contexts being restored, by name: functions saved from a context are
# rebuilt on its new globals (see context).
_restoring = {}


def context(name):
    """The globals of the context being restored under name."""
    return _restoring[name]


class _ContextRef:
    """Stands for a context's globals in a saved function: loads as context(name)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return (context, (self.name,))


class StateError(Exception):
    """The state cannot be saved or loaded; the message says why."""


class Deadline(BaseException):
    """The time limit passed (a BaseException: the code's handlers let it through)."""


class _Broken(BaseException):
    """The pipe failed: the supervisor stopped reading (the size cap) or writing."""


def _clip(text, limit):
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


def _type_name(value):
    try:
        t = type(value)
        return _clip(t.__module__ + "." + t.__qualname__ if t.__module__ not in ("builtins", "__main__") else t.__qualname__, MAX_NAME)
    except Exception:
        return "?"


def _reason(e):
    try:
        return _clip("%s: %s" % (type(e).__name__, e), MAX_REASON)
    except Exception:
        return type(e).__name__


class _Report:
    def __init__(self):
        self.contexts = []
        self.globals, self.count = [], 0
        self.lost, self.lost_count = [], 0

    def add(self, ctx, name, type_name, module=None):
        self.count += 1
        if len(self.globals) < MAX_LISTED:
            g = {"context": _clip(ctx, MAX_NAME), "name": _clip(name, MAX_NAME), "type": type_name}
            if module:
                g["module"] = _clip(module, MAX_NAME)
            self.globals.append(g)

    def lose(self, ctx, name, type_name, reason):
        self.lost_count += 1
        if len(self.lost) < MAX_LISTED:
            self.lost.append({"context": _clip(ctx, MAX_NAME), "name": _clip(name, MAX_NAME), "type": type_name, "reason": reason})

    def dict(self):
        return {"contexts": self.contexts, "globals": self.globals, "count": self.count, "lost": self.lost, "lost_count": self.lost_count}


def _arm(seconds):
    # SIGALRM at the deadline, then every 50 ms: code that swallows one
    # (a __reduce__ catching everything) is interrupted again. The code's
    # own timer and handler come back afterwards.
    import _signal

    def expire(signum, frame):
        raise Deadline()

    old_handler = _signal.signal(_signal.SIGALRM, expire)
    old_timer = _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 0.001), 0.05)

    def disarm():
        _signal.setitimer(_signal.ITIMER_REAL, 0, 0)
        _signal.signal(_signal.SIGALRM, old_handler)
        if old_timer[0] > 0:
            _signal.setitimer(_signal.ITIMER_REAL, *old_timer)

    return disarm


def warm():
    """Loads what a save and a load use (cloudpickle imports some 50
    modules: 40-70 ms of CPU), so that the first one does not wait for it;
    returns an empty report."""
    import importlib  # noqa: F401

    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        pass  # a save says so itself
    return _Report().dict()


# --- saving ---


class _Out:
    """Buffered writes to the pipe; large buffers go straight through."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()

    def put(self, data):
        if len(data) >= 1 << 16:
            self.flush()
            self._write(data)
            return
        self.buf += data
        if len(self.buf) >= 1 << 16:
            self.flush()

    def flush(self):
        if self.buf:
            buf, self.buf = self.buf, bytearray()
            self._write(buf)

    def _write(self, data):
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as e:
            raise _Broken(e)

    def string(self, s):
        b = s.encode("utf-8", "surrogatepass")[:0xFFFF]
        self.put(len(b).to_bytes(2, "big") + b)

    def record(self, kind, a, b, c):
        self.put(kind)
        self.string(a)
        self.string(b)
        self.string(c)


class _Chunks:
    """The pickler's file: each write becomes chunks of the current value."""

    def __init__(self, out):
        self.out = out
        self.written = False

    def write(self, data):
        view = memoryview(data)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B") if view.c_contiguous else memoryview(view.tobytes())
        n = len(view)
        for i in range(0, n, CHUNK):
            part = view[i : i + CHUNK]
            self.out.put(len(part).to_bytes(4, "big"))
            self.out.put(part)
            self.written = True
        return n


# Builtin data: the C pickler saves it as cloudpickle's would (cloudpickle
# only adds ways to save functions, classes and other objects by value),
# without cloudpickle's import (some 50 modules, 40-70 ms of CPU in a
# fresh session). A state made only of it (checked up to PLAIN_WALK
# objects) is saved that way.
_PLAIN_ATOMS = frozenset((type(None), bool, int, float, complex, str, bytes, bytearray))
_PLAIN_CONTAINERS = frozenset((list, tuple, dict, set, frozenset))
PLAIN_WALK = 10000


def _plain(values):
    """Whether values hold builtin data only: exact types, no subclasses."""
    stack = list(values)
    seen = 0
    while stack:
        seen += 1
        if seen > PLAIN_WALK:
            return False
        v = stack.pop()
        t = type(v)
        if t in _PLAIN_ATOMS:
            continue
        if t not in _PLAIN_CONTAINERS:
            return False
        if t is dict:
            stack.extend(v.keys())
            stack.extend(v.values())
        else:
            stack.extend(v)
    return True


class _NotPlain(Exception):
    """A value of a plain state changed while it was saved (a thread of the code's)."""


def _plain_pickler(chunks):
    from _pickle import Pickler

    class PlainPickler(Pickler):
        # Anything but builtin data means the state changed after it was
        # found plain: the value is lost, said so, never saved by reference.
        def reducer_override(self, obj):
            # (A complex number's reduction names its type.)
            if type(obj) in _PLAIN_ATOMS or type(obj) in _PLAIN_CONTAINERS or obj is complex:
                return NotImplemented
            raise _NotPlain("it changed while the snapshot was taken (a %s appeared in it)" % _type_name(obj))

    return PlainPickler(chunks, protocol=5)


def _pickler(chunks, context_of):
    import cloudpickle

    class Pickler(cloudpickle.CloudPickler):
        # A function defined in a context is rebuilt on that context's new
        # globals, not on a copy of the globals it used: after a restore it
        # sees the context's later assignments, and a global it used that
        # could not be saved is a NameError when called, not a lost function.
        def _dynamic_function_reduce(self, func):
            rv = super()._dynamic_function_reduce(func)
            name = context_of.get(id(func.__globals__))
            if name is None or len(rv) != 6 or len(rv[1]) < 2:
                return rv
            make, newargs, state, items, dict_items, setstate = rv
            newargs = (newargs[0], _ContextRef(name)) + tuple(newargs[2:])
            if type(state) is tuple and len(state) == 2 and "__globals__" in state[1]:
                state[1]["__globals__"] = {}
            return (make, newargs, state, items, dict_items, setstate)

    return Pickler(chunks, protocol=5)


def save(fd, contexts, seconds, skip):
    """Writes the globals of contexts ({name: [module, cwd]}) to fd, within
    seconds; returns the report. skip(value) is true for the harness's own
    objects (the tools namespace). Raises StateError."""
    disarm = _arm(seconds)
    try:
        return _save(fd, contexts, skip)
    except Deadline:
        raise StateError("the snapshot took longer than its time limit (%.1f s)" % seconds)
    except _Broken as e:
        raise StateError("the snapshot's pipe closed (%s): the supervisor stopped reading" % e.args[0])
    finally:
        disarm()


def _save(fd, contexts, skip):
    module_type = type(sys)
    report = _Report()
    out = _Out(fd)
    chunks = _Chunks(out)
    context_of = {id(ctx[0].__dict__): name for name, ctx in contexts.items()}
    # The globals to save, listed once: the plain check and the pickling
    # see the same ones.
    todo = []
    for cname, ctx in contexts.items():
        for name, value in list(ctx[0].__dict__.items()):
            if type(name) is not str or name in _MODULE_NAMES or skip(value):
                continue
            todo.append((cname, name, value))
    by_ref = lambda v: type(v) is module_type and sys.modules.get(getattr(v, "__name__", None)) is v  # noqa: E731
    if _plain(v for _, _, v in todo if not by_ref(v)):
        pickler = _plain_pickler(chunks)
    else:
        pickler = _pickler(chunks, context_of)
    out.put(MAGIC)
    # Every context first: a restore creates them before any value, so a
    # saved function finds its context's globals.
    for name, ctx in contexts.items():
        out.record(CONTEXT, name, ctx[1] or "", "")
        report.contexts.append(_clip(name, MAX_NAME))
    for cname, name, value in todo:
        if by_ref(value):
            # By reference: imported again at the restore.
            out.record(MODULE, cname, name, value.__name__)
            report.add(cname, name, "module", value.__name__)
            continue
        type_name = _type_name(value)
        out.record(VALUE, cname, name, type_name)
        chunks.written = False
        try:
            pickler.dump(value)
        except (Deadline, _Broken):
            raise
        except BaseException as e:  # noqa: B036 - whatever the value's reduction raised: it is lost, said so
            # A fresh memo, as the restore will have (cloudpickle's from
            # here: the state was not as plain as it looked).
            pickler = _pickler(chunks, context_of)
            reason = e.args[0] if type(e) is _NotPlain else _reason(e)
            out.put(ABANDONED.to_bytes(4, "big"))
            out.string(reason)
            report.lose(cname, name, type_name, reason)
            continue
        out.put(b"\0\0\0\0")
        report.add(cname, name, type_name)
    out.record(END, "", "", str(report.count))
    out.flush()
    return report.dict()


# --- loading ---


class _In:
    """Reads the pipe through a buffer."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = b""
        self.pos = 0

    def read(self, n):
        # Exactly n bytes, or StateError at the end of the stream.
        if self.pos + n <= len(self.buf):
            b = self.buf[self.pos : self.pos + n]
            self.pos += n
            return b
        parts = [self.buf[self.pos :]]
        have = len(parts[0])
        self.buf, self.pos = b"", 0
        while have < n:
            chunk = os.read(self.fd, max(n - have, 1 << 16))
            if not chunk:
                raise StateError("the state is truncated: it ends in the middle of a record")
            if have + len(chunk) > n:
                self.buf, self.pos = chunk, n - have
                chunk = chunk[: n - have]
            parts.append(chunk)
            have += len(chunk)
        return b"".join(parts)

    def string(self):
        n = int.from_bytes(self.read(2), "big")
        try:
            return self.read(n).decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise StateError("the state is damaged: a name is not UTF-8")


class _Abandoned(Exception):
    """The value was not saved (it failed half-way through its pickle)."""


class _Value:
    """The unpickler's file: the current value's chunks, read as one stream."""

    def __init__(self, src):
        self.src = src
        self.left = 0  # bytes left in the current chunk
        self.ended = False

    def start(self):
        self.left, self.ended = 0, False

    def _next(self):
        n = int.from_bytes(self.src.read(4), "big")
        if n == ABANDONED:
            self.ended = True
            raise _Abandoned(self.src.string())
        if n == 0:
            self.ended = True
        self.left = n

    def read(self, n=-1):
        out = []
        while (n < 0 or n > 0) and not self.ended:
            if self.left == 0:
                self._next()
                continue
            k = self.left if n < 0 else min(n, self.left)
            out.append(self.src.read(k))
            self.left -= k
            if n > 0:
                n -= k
        return b"".join(out)

    def readinto(self, b):
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def readline(self):
        out = []
        while not self.ended:
            if self.left == 0:
                self._next()
                continue
            c = self.src.read(1)
            self.left -= 1
            out.append(c)
            if c == b"\n":
                break
        return b"".join(out)

    def skip(self):
        # To the end of the value, after a load that failed or stopped short.
        while not self.ended:
            if self.left:
                self.src.read(self.left)
                self.left = 0
            self._next()


def load(fd, contexts, seconds, permitted, new_module):
    """Reads a state from fd, within seconds, into contexts: the contexts it
    names are replaced by the saved ones, and only once all of it was read
    (on an error the harness's contexts are as they were). permitted(name)
    says whether the import policy lets a module be imported again;
    new_module() makes a context's fresh __main__. Raises StateError."""
    disarm = _arm(seconds)
    try:
        return _load(fd, contexts, permitted, new_module)
    except Deadline:
        raise StateError("the restore took longer than its time limit (%.1f s)" % seconds)
    except OSError as e:
        raise StateError("the state could not be read: %s" % e)
    finally:
        _restoring.clear()
        disarm()


def _load(fd, contexts, permitted, new_module):
    import importlib

    # The C unpickler itself (pickle.Unpickler is it): the pickle module
    # imports re and more, a good part of a fresh session's restore.
    try:
        from _pickle import Unpickler
    except ImportError:
        from pickle import Unpickler

    src = _In(fd)
    if src.read(len(MAGIC)) != MAGIC:
        raise StateError("this is not a codecage session state (its header is wrong)")
    value = _Value(src)
    unpickler = Unpickler(value)
    failed = None  # the value that failed to load since the last new pickler
    report = _Report()
    staged = {}
    saved = 0  # the globals the snapshot says it saved, counted again
    while True:
        kind = src.read(1)
        a, b, c = src.string(), src.string(), src.string()
        if kind == END:
            if c != str(saved):
                raise StateError("the state is damaged: it ends with %s globals saved, %d were found" % (_clip(c, 20), saved))
            break
        if kind == CONTEXT:
            main = new_module()
            staged[a] = [main, b or None]
            _restoring[a] = main.__dict__
            report.contexts.append(_clip(a, MAX_NAME))
            continue
        if a not in staged:
            raise StateError("the state is damaged: a global of context %r comes before the context" % _clip(a, MAX_NAME))
        g = staged[a][0].__dict__
        if kind == MODULE:
            saved += 1
            if not permitted(c):
                report.lose(a, b, "module", "ImportError: the import policy does not allow module %s" % _clip(c, MAX_NAME))
                continue
            try:
                g[b] = importlib.import_module(c)
            except Exception as e:
                report.lose(a, b, "module", _reason(e))
                continue
            report.add(a, b, "module", c)
            continue
        if kind != VALUE:
            raise StateError("the state is damaged: unknown record %r" % kind[:1])
        value.start()
        if failed is not None:
            try:
                value.skip()
            except _Abandoned as e:
                unpickler, failed = Unpickler(value), None
                report.lose(a, b, c, "not saved: " + _clip(e.args[0], MAX_REASON))
                continue
            saved += 1
            report.lose(a, b, c, "not loaded: it may share objects with %s, which failed to load" % failed)
            continue
        try:
            v = unpickler.load()
        except _Abandoned as e:
            unpickler = Unpickler(value)
            report.lose(a, b, c, "not saved: " + _clip(e.args[0], MAX_REASON))
            continue
        except (Deadline, StateError, OSError):
            raise
        except BaseException as e:  # noqa: B036 - the value's own setstate may raise anything
            saved += 1
            value.skip()
            failed = _clip(b, MAX_NAME)
            report.lose(a, b, c, _reason(e))
            continue
        saved += 1
        value.skip()
        g[b] = v
        report.add(a, b, _type_name(v))
    contexts.update(staged)
    return report.dict()

