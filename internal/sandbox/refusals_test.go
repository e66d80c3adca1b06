package sandbox_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/sandbox"
)

// A run the egress proxy refuses 40 times names the first 32 refusals in
// its execute event's security events and sums up the rest in one entry,
// as the audit log stores them.
func TestEgressRefusalsAreCappedWithASummary(t *testing.T) {
	srv, other, _ := egressServers(t)
	cfg := policy.DefaultConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{strings.TrimPrefix(srv.URL, "http://")}
	svc := newServiceWith(t, cfg)
	rec := &recorder{}
	svc.SetObserver(rec)
	res := execute(t, svc, sandbox.Request{Code: fmt.Sprintf(`import urllib.request, urllib.error
codes = []
for i in range(40):
    try:
        urllib.request.urlopen("%s/%%d" %% i, timeout=10)
    except urllib.error.HTTPError as e:
        codes.append(e.code)
codes.count(403)`, other.URL)})
	if !res.Success || string(res.Result) != "40" {
		t.Fatalf("run: %s %+v", res.Result, res.Error)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var got []string
	for _, ev := range rec.evs {
		if ev.Kind == sandbox.EventExecute {
			got = ev.SecurityEvents
		}
	}
	if len(got) != 33 || got[32] != "egress_denied:and 8 more refused" {
		t.Fatalf("%d security events, the last %q", len(got), got[len(got)-1:])
	}
	for _, se := range got[:32] {
		if !strings.HasPrefix(se, "egress_denied:127.0.0.1") {
			t.Fatalf("security event %q", se)
		}
	}
}
