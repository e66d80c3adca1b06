# codecage's sudo server in a gVisor machine with root inside. runsc starts
# the harness as root of the machine's own user namespace (no host
# privilege: the block's first id to the host); the harness's init, PID 1,
# runs this (CODECAGE_SUDO_SERVER) before it forks the harness, which then
# becomes the machine's user. The init answers the sudo of every process of
# the machine (jail's sudo.py, on the socket) as a native machine's init
# does: an order and its caller's stdin, stdout and stderr in, the root
# process's pid, then its end, out. It is PID 1 (no signal of the code's
# reaches it, not even root's kill -9 -1) and a process of gVisor's kernel
# alone, so a parked or forked machine keeps its sudo.
#
# CODECAGE_SUDO is "UID:SOCKET". The init calls prepare() before its fork,
# drop() in the harness after it, start() in itself, and reaped() with
# each child it waits for that is not the harness (a root process's end).
import os

MAX_BUSY = 64  # sudo commands waiting or running at once


class Sudo:
    def __init__(self, spec):
        import socket
        import threading

        uid, _, path = spec.partition(":")
        self.uid = int(uid)
        try:
            os.unlink(path)  # a socket a memory image's machine left
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        os.chmod(path, 0o666)  # anyone in the machine: E2B's passwordless sudo
        self.listener.listen(16)
        self.lock = threading.Condition()
        self.mine = set()  # root processes whose end a connection awaits
        self.ended = {}  # pid -> wait status, reaped by the init
        self.busy = threading.BoundedSemaphore(MAX_BUSY)

    def drop(self):
        # In the harness's process: the machine's user, no capability.
        self.listener.close()
        os.setgroups([])
        os.setresgid(self.uid, self.uid, self.uid)
        os.setresuid(self.uid, self.uid, self.uid)

    def start(self):
        import threading

        threading.Thread(target=self.accept, daemon=True).start()

    def reaped(self, pid, status):
        with self.lock:
            if pid in self.mine:
                self.ended[pid] = status
                self.lock.notify_all()

    def accept(self):
        import threading

        while True:
            try:
                conn, _ = self.listener.accept()
            except InterruptedError:
                continue
            except OSError:
                return
            if not self.busy.acquire(blocking=False):
                answer(conn, {"Error": "this machine runs %d sudo commands already" % MAX_BUSY})
                conn.close()
                continue
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn):
        import threading

        try:
            order, fds = read_order(conn)
            if isinstance(order, str):
                answer(conn, {"Error": order})
                return
            with self.lock:  # the init reaps it no sooner than it is known
                pid = start(order, fds)
                self.mine.add(pid)
            answer(conn, {"PID": pid})
            threading.Thread(target=forward_signals, args=(conn, pid), daemon=True).start()
            with self.lock:
                while pid not in self.ended:
                    self.lock.wait()
                status = self.ended.pop(pid)
                self.mine.discard(pid)
            if os.WIFSIGNALED(status):
                answer(conn, {"Exited": True, "Code": -1, "Signal": os.WTERMSIG(status)})
            else:
                answer(conn, {"Exited": True, "Code": os.waitstatus_to_exitcode(status), "Signal": 0})
        except Exception as e:  # one order's failure never ends the server
            answer(conn, {"Error": "sudo: %s" % str(e)[:500]})
        finally:
            conn.close()
            self.busy.release()


def answer(conn, msg):
    import json

    try:
        conn.send(json.dumps(msg).encode())
    except OSError:
        pass


def read_order(conn):
    # The order (JSON) and exactly three descriptors, or why not.
    import json
    import socket

    msg, fds, _, _ = socket.recv_fds(conn, 256 << 10, 4)
    ok = len(fds) == 3
    why = "the order came without its caller's stdin, stdout and stderr"
    if ok:
        try:
            order = json.loads(msg)
            argv, env, cwd = order["Argv"], order.get("Env") or [], order.get("Dir") or "/"
            ok = isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and argv[0].startswith("/")
            ok = ok and isinstance(env, list) and all(isinstance(e, str) for e in env) and isinstance(cwd, str)
        except (ValueError, KeyError, TypeError, AttributeError):
            ok = False
        why = "a malformed order (the command's path must be absolute)"
    if not ok:
        for fd in fds:
            os.close(fd)
        return why, None
    return (argv, env, cwd), fds


def start(order, fds):
    # The command as root, in a session of its own (its group is what a
    # forwarded signal reaches), on the caller's descriptors, dumpable.
    argv, env, cwd = order
    pid = os.fork()
    if pid == 0:
        try:
            import ctypes

            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: its own /proc
            os.setsid()
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
            os.closerange(3, 1 << 16)
            try:
                os.chdir(cwd)
            except OSError:
                os.chdir("/")
            os.execve(argv[0], argv, dict(e.split("=", 1) for e in env if "=" in e))
        except BaseException as e:  # noqa: B036 - the child must never return
            try:
                os.write(2, ("sudo: %s: %s\n" % (argv[0][:200], e)).encode())
            finally:
                os._exit(127)
    for fd in fds:
        os.close(fd)
    return pid


def forward_signals(conn, pid):
    # What the caller forwards (its ^C, its kill) goes to the command and
    # its group, until the caller hangs up.
    import json

    while True:
        try:
            msg = conn.recv(512)
        except OSError:
            return
        if not msg:
            return
        try:
            sig = int(json.loads(msg).get("Signal", 0))
        except (ValueError, TypeError, AttributeError):
            continue
        if 0 < sig < 65:
            for target in (-pid, pid):
                try:
                    os.kill(target, sig)
                except OSError:
                    pass
