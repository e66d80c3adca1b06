# codecage's sudo, in a machine with root inside: the command runs as root
# of the machine's own user namespace (no host privilege), started by the
# machine's init, which listens on SOCKET. Set-user-ID programs cannot
# raise anyone here (no_new_privs), so a real sudo could not work.
# Everyone in the machine may use it, as E2B's user has passwordless sudo.
# The first line, the interpreter, is the init's to write.
import json
import os
import shutil
import signal
import socket
import sys

SOCKET = "/opt/codecage/run/sudo.sock"
USAGE = """usage: sudo [-u root] [-EHnSk] [-i | -s] [--] [command [args...]]
codecage's sudo runs a command as root inside this machine (its own user
namespace: no host privilege)."""


def fail(msg, code=1):
    sys.stderr.write("sudo: %s\n" % msg)
    sys.exit(code)


def parse(args):
    user, login, shell, i = "root", False, False, 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        if a in ("-h", "--help"):
            print(USAGE)
            sys.exit(0)
        if a in ("-V", "--version"):
            print("codecage sudo: root inside the machine")
            sys.exit(0)
        if a in ("-v", "--validate", "-k", "-K", "--reset-timestamp", "--remove-timestamp") and i + 1 == len(args):
            sys.exit(0)  # no password to validate or forget
        if a in ("-u", "--user"):
            i += 1
            if i == len(args):
                fail("option requires an argument -- 'u'")
            user = args[i]
        elif a.startswith("--user="):
            user = a.split("=", 1)[1]
        elif a.startswith("-u"):
            user = a[2:]
        elif a in ("-i", "--login"):
            login = True
        elif a in ("-s", "--shell"):
            shell = True
        elif a.startswith("--preserve-env") or a in ("--set-home", "--non-interactive", "--stdin"):
            pass
        elif a[0] == "-" and a[1:] and all(c in "EHnSkPAbiIs" for c in a[1:]):
            login = login or "i" in a
            shell = shell or "s" in a
        else:
            fail("unknown option %s\n%s" % (a, USAGE))
        i += 1
    return user, login, shell, args[i:]


def main():
    user, login, shell, cmd = parse(sys.argv[1:])
    me = os.getuid()
    if user not in ("root", "0", "#0"):
        try:
            import pwd

            if pwd.getpwnam(user.lstrip("#")).pw_uid == me:
                if not cmd:
                    fail("a command is needed")
                os.execvp(cmd[0], cmd)
        except (KeyError, ImportError):
            pass
        fail("%s: codecage's sudo runs commands as root, or as yourself" % user)
    env = dict(os.environ)
    env.update(HOME="/root", USER="root", LOGNAME="root", SUDO_USER=env.get("USER", str(me)), SUDO_UID=str(me),
               SUDO_GID=str(os.getgid()), SUDO_COMMAND=" ".join(cmd)[:4096])
    root_shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    if login or shell:
        argv = [root_shell] + (["-l"] if login else []) + (["-c", " ".join(cmd)] if cmd else [])
    elif not cmd:
        fail(USAGE)
    else:
        prog = cmd[0] if "/" in cmd[0] else shutil.which(cmd[0], path=env.get("PATH", "/usr/bin:/bin"))
        if not prog:
            fail("%s: command not found" % cmd[0])
        argv = [os.path.abspath(prog)] + cmd[1:]
    cwd = "/root" if login else os.getcwd()
    # Signals wait until the command has started and can be forwarded: the
    # caller may signal sudo as soon as it sees the root process.
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(SOCKET)
        order = json.dumps({"Argv": argv, "Env": ["%s=%s" % kv for kv in env.items()], "Dir": cwd}).encode()
        socket.send_fds(s, [order], [0, 1, 2])
        started = json.loads(s.recv(1 << 16) or b"{}")
    except (OSError, ValueError) as e:
        fail("root inside this machine is not available: %s" % e)
    if started.get("Error") or not started.get("PID"):
        fail(started.get("Error") or "the machine's init did not start the command")

    def forward(signum, frame):
        try:
            s.send(json.dumps({"Signal": signum}).encode())
        except OSError:
            pass

    for sig in forwarded:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, forwarded)
    while True:
        try:
            msg = s.recv(1 << 16)
        except InterruptedError:
            continue
        if not msg:
            fail("the machine's init went away")
        end = json.loads(msg)
        if end.get("Exited"):
            sys.exit(128 + end["Signal"] if end.get("Signal") else end.get("Code", 1))


main()
