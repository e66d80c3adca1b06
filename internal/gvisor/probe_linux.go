package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/jail"
)

var probes sync.Map // Runtime -> *probeOnce

type probeOnce struct {
	once sync.Once
	info Availability
}

// Probe reports whether gVisor sandboxes run on this host with rt, by
// running one (`/bin/true`). The answer is kept for the process's life.
func Probe(rt Runtime) Availability {
	v, _ := probes.LoadOrStore(rt, &probeOnce{})
	p := v.(*probeOnce)
	p.once.Do(func() { p.info = probe(rt) })
	return p.info
}

func probe(rt Runtime) Availability {
	info := Availability{Platform: rt.platform()}
	bin, err := rt.binary()
	if err != nil {
		info.Error = err.Error()
		return info
	}
	info.Runsc = bin
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		info.Error = fmt.Sprintf("%s --version: %v", bin, err)
		return info
	}
	info.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	start := time.Now()
	sb, err := Start(ctx, rt, jail.Spec{Argv: []string{"/bin/true"}, Limits: jail.Limits{Timeout: 30 * time.Second}, Stderr: &stderr})
	if err != nil {
		info.Error = err.Error()
		return info
	}
	exit := sb.Wait()
	if exit.ExitCode != 0 || exit.Limit != jail.LimitNone {
		info.Error = fmt.Sprintf("a test sandbox failed (exit %d, signal %d, limit %q): %s", exit.ExitCode, exit.Signal, exit.Limit, strings.TrimSpace(stderr.String()+"\n"+sb.Log()))
		return info
	}
	info.Available = true
	info.StartupSeconds = time.Since(start).Seconds()
	return info
}
