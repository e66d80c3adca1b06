package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// baselines runs print(1) without codecage: the bare interpreter, and
// bwrap when it is installed and works here.
func (b *bencher) baselines(ctx context.Context) error {
	py := b.cfg.Interpreter
	bare := func(ctx context.Context, _ int) string { return runCommand(ctx, py, "-c", Print1Code) }
	for _, c := range []struct {
		key  string
		n, c int
	}{{"bare_python_sequential", b.n, 1}, {"bare_python_concurrent", 2 * b.n, b.clients}} {
		b.progress("%s: %d runs, %d client(s)", c.key, c.n, c.c)
		row := measure(ctx, c.key, "python3 -c print(1) (bare)", c.n, c.c, bare)
		if err := ctx.Err(); err != nil {
			return err
		}
		row.Notes = py
		b.rep.Rows = append(b.rep.Rows, row)
	}

	name := "bwrap python3 -c print(1)"
	bwrap, err := exec.LookPath("bwrap")
	skipped := ""
	if err != nil {
		skipped = "not installed"
	} else if msg := runCommand(ctx, bwrap, bwrapArgs(py)...); msg != "" {
		skipped = "does not run here: " + msg
	}
	if skipped != "" {
		b.rep.Rows = append(b.rep.Rows,
			Row{Key: "bwrap_sequential", Case: name, Clients: 1, Skipped: skipped},
			Row{Key: "bwrap_concurrent", Case: name, Clients: b.clients, Skipped: skipped})
		return nil
	}
	job := func(ctx context.Context, _ int) string { return runCommand(ctx, bwrap, bwrapArgs(py)...) }
	for _, c := range []struct {
		key  string
		n, c int
	}{{"bwrap_sequential", b.n, 1}, {"bwrap_concurrent", 2 * b.n, b.clients}} {
		b.progress("%s: %d runs, %d client(s)", c.key, c.n, c.c)
		row := measure(ctx, c.key, name, c.n, c.c, job)
		if err := ctx.Err(); err != nil {
			return err
		}
		row.Notes = "--unshare-all, /usr read-only"
		b.rep.Rows = append(b.rep.Rows, row)
	}
	return nil
}

func bwrapArgs(python string) []string {
	return []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", python, "-c", Print1Code}
}

// runCommand runs a print(1) command; it returns "" when it printed 1.
func runCommand(ctx context.Context, name string, args ...string) string {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return strings.TrimSpace(err.Error() + ": " + firstLine(stderr.String()))
	}
	if string(out) != "1\n" {
		return fmt.Sprintf("unexpected output %q", out)
	}
	return ""
}
