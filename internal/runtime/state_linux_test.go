package runtime

import (
	"bytes"
	"strings"
	"testing"
)

// The harness's side of a state (plain processes: the jail's part is the
// fleet's tests): globals naming one object still do after a restore
// (unless a value that could not be saved came between them); a
// value that fails to load is named with why, and so are the values saved
// after it that may share its objects (never loaded wrong); a value that
// could not be saved does not disturb the ones after it; a module the
// restore's import policy refuses is named, not imported.
func TestStateFailuresAreNamed(t *testing.T) {
	src := startHarness(t)
	run(t, src, Request{Code: `
import math as m, json
class Bad:
    def __init__(self): self.v = 1
    def __setstate__(self, state): raise ValueError("refuses to load")
gen = (i for i in range(3))
shared = [1, 2]
alias = shared
bad = Bad()
after = shared
`})
	var buf bytes.Buffer
	saved, err := SaveState(src, &buf, StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if saved.LostCount != 1 || saved.Lost[0].Name != "gen" || !strings.Contains(saved.Lost[0].Reason, "generator") {
		t.Fatalf("snapshot lost %+v", saved.Lost)
	}
	dst := startHarness(t)
	rep, err := LoadState(dst, &buf, StateOptions{AllowedImports: []string{"math"}})
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]string{}
	for _, g := range rep.Lost {
		lost[g.Name] = g.Reason
	}
	want := map[string]string{"gen": "not saved: TypeError", "bad": "refuses to load", "after": "may share objects with bad", "json": "import policy"}
	if len(lost) != len(want) || rep.LostCount != len(want) {
		t.Fatalf("restore lost %v, want %v", lost, want)
	}
	for name, why := range want {
		if !strings.Contains(lost[name], why) {
			t.Fatalf("%s: %q, want it to say %q", name, lost[name], why)
		}
	}
	if got := string(run(t, dst, Request{Code: "(alias is shared, m.floor(2.5), 'after' in globals())"}).Result); got != "[true,2,false]" {
		t.Fatalf("restored: %s", got)
	}
}
