package jail

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// A command in a machine is a fork of its init; a command jail is a whole
// sandbox (namespaces, root, cgroup). Both run /bin/true to its end.
func BenchmarkMachineSpawn(b *testing.B) {
	sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "infinity"}, Machine: true, Limits: Limits{Timeout: time.Hour}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { sb.Kill(LimitNone); sb.Wait(); sb.Channel().Close() }()
	for b.Loop() {
		p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/true"}, Dir: "/"})
		if err != nil {
			b.Fatal(err)
		}
		if exit := p.Wait(); exit.ExitCode != 0 {
			b.Fatalf("exit %+v", exit)
		}
	}
}

func BenchmarkCommandJail(b *testing.B) {
	for b.Loop() {
		sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/true"}, NoChannel: true})
		if err != nil {
			b.Fatal(err)
		}
		if exit := sb.Wait(); exit.ExitCode != 0 {
			b.Fatalf("exit %+v", exit)
		}
		sb.Channel().Close()
	}
}

// BenchmarkMachineStart starts and ends a machine with its own root and
// one command, with one uid, and with root inside (a block of ids, the
// /usr/local overlay, sudo's listener): what root inside adds to a
// machine's start. Reports the CPU of the test process and its reaped
// children (the inits) per start.
func BenchmarkMachineStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("a machine with root inside needs root")
	}
	for _, rootInside := range []bool{false, true} {
		name := map[bool]string{false: "one-uid", true: "root-inside"}[rootInside]
		b.Run(name, func(b *testing.B) {
			root := b.TempDir()
			var before, after syscall.Rusage
			cpu := func(r *syscall.Rusage) time.Duration {
				return time.Duration(r.Utime.Nano() + r.Stime.Nano())
			}
			var self0, self1 syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
			syscall.Getrusage(syscall.RUSAGE_SELF, &self0)
			for b.Loop() {
				n := 1
				if rootInside {
					n = MachineIDs
				}
				first, err := ReserveUIDs(n)
				if err != nil {
					b.Fatal(err)
				}
				uid := first
				if rootInside {
					uid = first + SandboxUID
				}
				if err := os.Chown(root, uid, uid); err != nil {
					b.Fatal(err)
				}
				sb, err := Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "infinity"}, Machine: true, MachineRoot: root,
					HostUID: uid, RootInside: rootInside, Limits: Limits{Timeout: time.Hour}})
				if err != nil {
					b.Fatal(err)
				}
				p, err := sb.Spawn(ProcSpec{Argv: []string{"/bin/true"}, Dir: "/"})
				if err != nil {
					b.Fatal(err)
				}
				p.Wait()
				sb.Kill(LimitNone)
				sb.Wait()
				sb.Channel().Close()
				ReleaseUIDs(first, n)
			}
			syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
			syscall.Getrusage(syscall.RUSAGE_SELF, &self1)
			b.ReportMetric(float64(cpu(&after)-cpu(&before))/float64(b.N)/1e6, "init-cpu-ms/op")
			b.ReportMetric(float64(cpu(&self1)-cpu(&self0))/float64(b.N)/1e6, "supervisor-cpu-ms/op")
		})
	}
}
