package envs

import (
	"strings"
	"testing"
)

// The build's log keeps offsets stable past its caps: lines beyond them
// are counted, and the last entry says how many were not kept.
func TestTemplateBuildLogCaps(t *testing.T) {
	b := &Chain{status: ChainBuilding}
	long := strings.Repeat("y", 3*maxChainLogCut)
	_, _ = b.Write([]byte("first\nsec"))
	_, _ = b.Write([]byte("ond\n" + long + "\n"))
	for i := 0; i < maxLogEntries+10; i++ {
		_, _ = b.Write([]byte("line\n"))
	}
	first := b.page(0, 3).Logs
	if len(first) != 3 || first[0].Message != "first" || first[1].Message != "second" || len(first[2].Message) > maxChainLogCut+len("…") {
		t.Fatalf("first entries %+v", first)
	}
	b.finish(&Failure{Step: "2", Message: "it broke"})
	p := b.page(maxLogEntries-1, 100)
	status, tail, reason := p.Status, p.Logs, p.Failure
	if status != ChainFailed || reason == nil || reason.Step != "2" || len(tail) != 3 ||
		!strings.Contains(tail[1].Message, "lines of the build's log were not kept") || tail[2].Message != "it broke" || tail[2].Level != "error" {
		t.Fatalf("tail %s %+v %+v", status, tail, reason)
	}
	if rest := b.page(maxLogEntries+2, 100).Logs; len(rest) != 0 {
		t.Fatalf("past the end: %+v", rest)
	}
	if rest := b.page(-5, 2).Logs; len(rest) != 2 {
		t.Fatalf("negative offset: %+v", rest)
	}
}
