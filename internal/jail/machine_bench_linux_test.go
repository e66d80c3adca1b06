package jail

import (
	"context"
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
