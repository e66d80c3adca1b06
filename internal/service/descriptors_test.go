package service_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// fdListing prints one line, "FDS <starttime> fd:kind:target ...", of the
// descriptors its process holds (the listing's own left out), then sleeps
// until the test has looked at it from the host. starttime (field 22 of
// /proc/self/stat) is the same seen from the host: with the pipe and
// socket inodes it finds the very process there.
const fdListing = `import os, stat, time
def _fds():
    out = []
    for n in sorted(os.listdir("/proc/self/fd"), key=int):
        fd = int(n)
        try:
            m = os.fstat(fd).st_mode
        except OSError:
            continue  # the listing's own descriptor, closed since
        kind = ("chr" if stat.S_ISCHR(m) else "fifo" if stat.S_ISFIFO(m) else "sock" if stat.S_ISSOCK(m)
                else "dir" if stat.S_ISDIR(m) else "reg" if stat.S_ISREG(m) else "other")
        out.append("%d:%s:%s" % (fd, kind, os.readlink("/proc/self/fd/" + n)))
    return out
with open("/proc/self/stat") as f:
    start = f.read().rsplit(")", 1)[1].split()[19]
print("FDS", start, *_fds(), flush=True)
time.sleep(SLEEP)
`

// The contract: a run's code starts with fd 0 (/dev/null), 1 and 2 (its
// output) and 3 (the harness's channel: the requests come through it); a
// command starts with 0, 1 and 2 alone. Nothing else, on either backend.
var (
	codeFDs     = []string{"0:chr", "1:fifo", "2:fifo", "3:sock"}
	commandFDs  = []string{"0:chr", "1:fifo", "2:fifo"}
	terminalFDs = []string{"0:chr", "1:chr", "2:chr"}
)

// A run's code and a command start with only the descriptors of the
// contract, judged inside (both backends) and, on the native backend, from
// the host too: /proc/<pid>/fd of the very process holds no more.
func TestCodeStartsWithOnlyItsDescriptors(t *testing.T) {
	svc := newService(t)
	t.Run("run", func(t *testing.T) {
		line := startListing(t, func(ctx context.Context, onLine func(string, string)) error {
			_, err := svc.Execute(ctx, service.Request{Code: strings.Replace(fdListing, "SLEEP", "60", 1), AllowedImports: []string{"*"},
				Timeout: time.Minute, OnOutput: onLine})
			return err
		})
		checkDescriptors(t, line, codeFDs)
	})
	t.Run("session", func(t *testing.T) {
		id := newSession(t, svc, "alice")
		// The session's harness outlives the run: the second run sees
		// what the first left, which is the first's (none here).
		for i := range 2 {
			res := inSession(t, svc, id, "alice", strings.Replace(fdListing, "SLEEP", "0", 1))
			if !res.Success {
				t.Fatalf("run %d: %+v", i, res)
			}
			fds := descriptorsOf(t, strings.TrimSpace(res.Stdout))
			if !slices.Equal(kinds(fds), codeFDs) {
				t.Fatalf("run %d in a session starts with %v, want %v", i, fds, codeFDs)
			}
		}
	})
	t.Run("command", func(t *testing.T) {
		line := startListing(t, func(ctx context.Context, onLine func(string, string)) error {
			_, err := svc.RunCommand(ctx, service.CommandRequest{Argv: []string{"python3", "-c", strings.Replace(fdListing, "SLEEP", "60", 1)},
				Timeout: time.Minute, OnOutput: onLine})
			return err
		})
		checkDescriptors(t, line, commandFDs)
	})
	t.Run("terminal", func(t *testing.T) {
		line := startListing(t, func(ctx context.Context, onLine func(string, string)) error {
			_, err := svc.RunCommand(ctx, service.CommandRequest{Argv: []string{"python3", "-c", strings.Replace(fdListing, "SLEEP", "60", 1)},
				Terminal: &service.TerminalSize{Cols: 200, Rows: 24}, Timeout: time.Minute, OnOutput: onLine})
			return err
		})
		// The terminal is 0, 1 and 2; the host sees the same pty.
		if fds := descriptorsOf(t, line); !slices.Equal(kinds(fds), terminalFDs) {
			t.Fatalf("a command on a terminal starts with %v, want %v", fds, terminalFDs)
		}
	})
}

// startListing starts fdListing with start, waits for its line, and
// cancels the run when the test ends.
func startListing(t *testing.T, start func(ctx context.Context, onLine func(stream, line string)) error) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lines := make(chan string, 1)
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		done <- start(ctx, func(stream, line string) {
			if stream == "stdout" && strings.HasPrefix(line, "FDS ") {
				once.Do(func() { lines <- strings.TrimSpace(line) })
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case line := <-lines:
		return line
	case err := <-done:
		t.Fatalf("the listing ended before it printed: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the listing printed nothing within 30 s")
	}
	return ""
}

// checkDescriptors checks what the process of line says it holds against
// want and, on the native backend, what the host sees it hold.
func checkDescriptors(t *testing.T, line string, want []string) {
	t.Helper()
	fds := descriptorsOf(t, line)
	if !slices.Equal(kinds(fds), want) {
		t.Fatalf("the code starts with %v, want %v", fds, want)
	}
	if onGVisor() {
		return // its processes are gVisor's, not the host's
	}
	start := strings.Fields(line)[1]
	pid := hostProcessOf(t, start, fds)
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range entries {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		seen = append(seen, e.Name()+":"+target)
	}
	slices.SortFunc(seen, func(a, b string) int { return fdNumber(a) - fdNumber(b) })
	var inside []string
	for _, f := range fds {
		n, _, _ := strings.Cut(f, ":")
		_, target, _ := strings.Cut(f[len(n)+1:], ":")
		inside = append(inside, n+":"+target)
	}
	if !slices.Equal(seen, inside) {
		t.Fatalf("from the host, process %d holds %v; inside it said %v", pid, seen, inside)
	}
	t.Logf("process %d holds %v, seen from the host", pid, seen)
}

// hostProcessOf finds the sandbox process started at start (clock ticks
// since boot) whose fd 1 is the one fds lists.
func hostProcessOf(t *testing.T, start string, fds []string) int {
	t.Helper()
	var out string
	for _, f := range fds {
		if strings.HasPrefix(f, "1:") {
			out = f[strings.LastIndex(f, ":pipe:")+1:]
		}
	}
	var found []int
	for _, p := range sandboxProcesses(t) {
		pid, _ := strconv.Atoi(strings.Fields(p)[0])
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(stat), ')')
		if f := strings.Fields(string(stat[i+1:])); len(f) < 20 || f[19] != start {
			continue
		}
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pid)); target == out {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("host processes started at %s with stdout %s: %v, want one (sandbox processes: %v)", start, out, found, sandboxProcesses(t))
	}
	return found[0]
}

// descriptorsOf parses the "fd:kind:target" fields of a listing line.
func descriptorsOf(t *testing.T, line string) []string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != "FDS" {
		t.Fatalf("not a listing: %q", line)
	}
	return f[2:]
}

// kinds are the "fd:kind" of each descriptor.
func kinds(fds []string) []string {
	var out []string
	for _, f := range fds {
		n, rest, _ := strings.Cut(f, ":")
		kind, _, _ := strings.Cut(rest, ":")
		out = append(out, n+":"+kind)
	}
	return out
}

func fdNumber(s string) int {
	n, _, _ := strings.Cut(s, ":")
	i, _ := strconv.Atoi(n)
	return i
}
