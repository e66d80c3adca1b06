package runtime

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

//go:embed zygote.py
var zygoteSource string

// ZygoteArgv starts a zygote: the harness with the zygote code before it.
func ZygoteArgv(interpreter string) []string {
	argv := Argv(interpreter)
	argv[harnessArg] = zygoteSource + "\n" + harnessSource
	return argv
}

// ZygoteEnv marks the harness environment env as a zygote's.
func ZygoteEnv(env []string) []string {
	return append(slices.Clone(env), "CODECAGE_ZYGOTE=1", "LD_BIND_NOW=1")
}

// SendFork asks the zygote, over its channel (a SOCK_SEQPACKET socket), for
// a cell with channel ch and output pipes stdout and stderr.
// warm asks the cell to run a trivial request before it says it is ready,
// so that the real one finds the interpreter's pages already copied: worth
// it when the cell will wait in a pool, not when a request waits for it.
// uid, when not zero, is the cell's own uid in the zygote's user namespace
// (jail.CellUID) and nproc its RLIMIT_NPROC; the zygote refuses a fork
// without a uid when its cells have uids of their own.
func SendFork(zygote *os.File, ch, stdout, stderr *os.File, warm bool, uid, nproc int) error {
	rights := unix.UnixRights(int(ch.Fd()), int(stdout.Fd()), int(stderr.Fd()))
	cmd := []byte("F")
	if !warm {
		cmd = []byte("f")
	}
	if uid > 0 {
		cmd = strconv.AppendInt(cmd, int64(uid), 10)
		cmd = strconv.AppendInt(append(cmd, ' '), int64(nproc), 10)
	}
	if err := unix.Sendmsg(int(zygote.Fd()), cmd, rights, nil, 0); err != nil {
		return fmt.Errorf("runtime: fork command: %w", err)
	}
	return nil
}

// ErrCellProtocol means a cell did not follow the cell protocol.
var ErrCellProtocol = errors.New("runtime: cell protocol violated")

// SendGo lets the cell go on once it is in its cgroup.
func SendGo(w io.Writer) error {
	_, err := w.Write([]byte("G"))
	return err
}

// cellMessage is one of the cell's own frames.
type cellMessage struct {
	Ready    bool `json:"ready"`
	CellExit *struct {
		Exit   int `json:"exit"`
		Signal int `json:"signal"`
	} `json:"cell_exit"`
}

// ReadReady waits for the ready frame: a cell's, once it is restricted and
// waiting, or a harness's that found its channel on stdin (gVisor: a
// slowly booting sandbox says when it can take code).
func ReadReady(r io.Reader) error {
	var m cellMessage
	if err := readJSONFrame(r, &m, 1<<10); err != nil {
		return err
	}
	if !m.Ready {
		return ErrCellProtocol
	}
	return nil
}
