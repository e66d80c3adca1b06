package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/codecage/codecage/internal/service"
	"github.com/codecage/codecage/internal/upstream"
)

// A run the egress proxy refuses 40 times names the first 32 refusals in
// its execute event's security events and sums up the rest in one entry,
// as the audit log stores them.
func TestEgressRefusalsAreCappedWithASummary(t *testing.T) {
	srv, other, _ := egressServers(t)
	cfg := service.LeanTestConfig()
	cfg.EnableNetwork = true
	cfg.NetworkAllow = []string{strings.TrimPrefix(srv.URL, "http://")}
	svc := newServiceWith(t, cfg)
	rec := &recorder{}
	svc.SetObserver(rec)
	res := execute(t, svc, service.Request{Code: fmt.Sprintf(`import urllib.request, urllib.error
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
		if ev.Kind == service.EventExecute {
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

// In a session too, refused tool calls spend the run's budget, and of the
// calls over it only 32 are events, then one summing up the rest; the
// budget and the summary are per run.
func TestSessionToolRefusalsAreCappedPerRun(t *testing.T) {
	srv := calcServer(t)
	svc, rec := codeModeService(t, map[string]upstream.ServerConfig{
		"calc": {URL: srv.URL, Headers: map[string]string{"Authorization": upstreamSecret}},
	})
	ctx := context.Background()
	info, err := svc.CreateSession(ctx, service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	code := `
told = {}
for i in range(100):
    try:
        tools.call("calc.made_up_%d" % i + "z" * 100000, {})
    except ToolError as e:
        k = "budget" if "budget" in str(e) else "denied"
        told[k] = told.get(k, 0) + 1
sorted(told.items())`
	for run := range 2 {
		res, err := svc.Execute(ctx, service.Request{SessionID: info.ID, Owner: "o", Code: code})
		if err != nil || !res.Success || string(res.Result) != `[["budget",50],["denied",50]]` {
			t.Fatalf("run %d: %v %s %+v", run, err, res.Result, res.Error)
		}
		rec.mu.Lock()
		var tool []service.Event
		for _, ev := range rec.evs {
			if ev.Kind == service.EventToolCall {
				tool = append(tool, ev)
			}
		}
		rec.evs = nil
		rec.mu.Unlock()
		outcomes := map[string]int{}
		for _, ev := range tool {
			outcomes[ev.Outcome]++
			if len(ev.Code) > 256 || len(ev.Detail) > 256 || len(ev.SecurityEvents) > 1 {
				t.Fatalf("an event of %d+%d bytes, %d security events: %.300q", len(ev.Code), len(ev.Detail), len(ev.SecurityEvents), ev.Code)
			}
		}
		last := tool[len(tool)-1]
		if len(tool) != 83 || outcomes["denied"] != 50 || outcomes["budget"] != 33 ||
			last.Detail != "and 18 more tool calls over the budget, not recorded one by one" || last.ExecutionID != info.ID {
			t.Fatalf("run %d: %d tool-call events %v, the last %+v", run, len(tool), outcomes, last)
		}
	}
}
