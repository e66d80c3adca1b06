package gvisor

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
)

// runsc exec exits 128+n when signal n ended its process, as a shell
// does, so a crash (SIGSEGV) and a program that exits 139 look the same.
// Its debug log, which takes its info lines even without --debug (about
// 1 KiB a process), names the wait status itself ("Exiting with status:
// N"), so a machine's command reports a signal as natively. The logs live in
// a directory of the sandbox's that only root may enter (a process's
// arguments and environment may be in them) and go once read.

// exitsDir holds the spawned processes' debug logs, under the bundle.
const exitsDir = "exits"

// maxExitLog bounds what is read of one log (the line is near its end).
const maxExitLog = 1 << 20

var exitLine = regexp.MustCompile(`Exiting with status: (\d+)`)

// exitLog is the path of the debug log of spawn name, its directory made.
func (s *Sandbox) exitLog(name string) (string, error) {
	dir := filepath.Join(s.dir, exitsDir)
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", err
	}
	return filepath.Join(dir, name+".log"), nil
}

// exitStatusIn reads the wait status runsc exec logged in path, and
// removes the log; known is false when it logged none (it failed).
func exitStatusIn(path string) (ws unix.WaitStatus, known bool) {
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxExitLog {
		_, _ = f.Seek(-maxExitLog, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, maxExitLog))
	i := bytes.LastIndex(b, []byte("Exiting with status: "))
	if i < 0 {
		return 0, false
	}
	m := exitLine.FindSubmatch(b[i:])
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseUint(string(m[1]), 10, 32)
	if err != nil {
		return 0, false
	}
	return unix.WaitStatus(n), true
}
