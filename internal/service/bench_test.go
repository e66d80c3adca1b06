package service_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/service"
)

// BenchmarkColdExecute is one stateless execution of print(1): a fresh
// sandbox from nothing, the interpreter started, the result returned.
func BenchmarkColdExecute(b *testing.B) {
	svc := newService(b)
	ctx := context.Background()
	for b.Loop() {
		res, err := svc.Execute(ctx, service.Request{Code: "print(1)"})
		if err != nil || res.Stdout != "1\n" {
			b.Fatalf("execute: %v %+v", err, res)
		}
	}
}

// BenchmarkBarePython is the yardstick: an unjailed python3 -c 'print(1)'.
func BenchmarkBarePython(b *testing.B) {
	for b.Loop() {
		out, err := exec.Command("/usr/bin/python3", "-c", "print(1)").Output()
		if err != nil || string(out) != "1\n" {
			b.Fatalf("python: %v %q", err, out)
		}
	}
}

// BenchmarkJailTrue is the jail alone: a sandbox running /bin/true.
func BenchmarkJailTrue(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		sb, err := jail.Start(ctx, jail.Spec{Argv: []string{"/bin/true"}})
		if err != nil {
			b.Fatal(err)
		}
		if e := sb.Wait(); e.ExitCode != 0 {
			b.Fatalf("exit %+v", e)
		}
		sb.Channel().Close()
	}
}
