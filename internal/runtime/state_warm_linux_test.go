package runtime

import (
	"bytes"
	"testing"
	"time"
)

// WarmState loads the state machinery into a harness ahead of its first
// snapshot (state.py compiled, cloudpickle imported), and leaves its
// contexts alone.
func TestWarmStateLoadsCloudpickle(t *testing.T) {
	ch := startHarness(t)
	const probe = "import sys\n['cloudpickle' in sys.modules, '_codecage_state' in sys.modules, sorted(k for k in globals() if not k.startswith('__'))]"
	if got := string(run(t, ch, Request{Code: probe, NewContext: true, Context: "probe"}).Result); got != `[false,false,["sys"]]` {
		t.Fatalf("before: %s", got)
	}
	if err := WarmState(ch, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := string(run(t, ch, Request{Code: probe, Context: "probe"}).Result); got != `[true,true,["sys"]]` {
		t.Fatalf("after WarmState: %s", got)
	}
	// The harness serves on: a snapshot after the warm-up works.
	run(t, ch, Request{Code: "x = 1"})
	var buf bytes.Buffer
	if _, err := SaveState(ch, &buf, StateOptions{}); err != nil {
		t.Fatal(err)
	}
}
