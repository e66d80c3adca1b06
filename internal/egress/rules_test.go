package egress

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

func TestRulesNormalizeAndRefuse(t *testing.T) {
	got, err := NetworkRules{AllowOut: []string{"API.Example.com", "*.svc.test", "10.1.2.3", "10.1.0.0/16", "::ffff:1.2.3.4"},
		DenyOut: []string{"0.0.0.0/0", "::/0", "192.168.1.7"}}.Normalized()
	if err != nil {
		t.Fatal(err)
	}
	want := NetworkRules{AllowOut: []string{"api.example.com", "*.svc.test", "10.1.2.3", "10.1.0.0/16", "1.2.3.4"},
		DenyOut: []string{"0.0.0.0/0", "::/0", "192.168.1.7"}}
	if !slices.Equal(got.AllowOut, want.AllowOut) || !slices.Equal(got.DenyOut, want.DenyOut) {
		t.Errorf("normalized %+v, want %+v", got, want)
	}
	bad := map[string]NetworkRules{
		"deny_out: \"example.com\"":      {DenyOut: []string{"example.com"}},
		"\"10.0.0.0/33\"":                {DenyOut: []string{"10.0.0.0/33"}},
		"without a port":                 {AllowOut: []string{"api.example.com:443"}},
		"not a destination":              {AllowOut: []string{"\xff\xfe"}},
		"'*' must be the whole":          {AllowOut: []string{"a*.example.com"}},
		"at most 256 entries":            {DenyOut: slices.Repeat([]string{"1.1.1.1"}, MaxRuleEntries+1)},
		"scoped IPv6":                    {AllowOut: []string{"fe80::1%eth0"}},
		`allow_out: "": empty host name`: {AllowOut: []string{""}},
	}
	for want, r := range bad {
		err := r.Check()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", r, err, want)
		}
		if err != nil && len(err.Error()) > 600 {
			t.Errorf("%q: error of %d bytes", r, len(err.Error()))
		}
	}
	// Every bad entry is named at once.
	err = NetworkRules{AllowOut: []string{"a b"}, DenyOut: []string{"x.io", "1.1.1.1/99"}}.Check()
	for _, w := range []string{`"a b"`, `"x.io"`, `"1.1.1.1/99"`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not name %s", err, w)
		}
	}
}

// The sandbox's rules narrow the operator's list and never widen it, on
// both the forward and the CONNECT path, and SetRules changes them on a
// running proxy.
func TestRulesNarrowThePolicy(t *testing.T) {
	be := newBackend(t)
	fx := start(t, config{
		allow: "api.test, other.test, *.wild.test, 127.0.0.1",
		hosts: map[string][]string{"api.test": {"127.0.0.1"}, "other.test": {"127.0.0.1"}, "unlisted.test": {"127.0.0.1"}},
		opts: func(o *Options) {
			o.Rules = NetworkRules{DenyOut: []string{AllTraffic}, AllowOut: []string{"api.test", "unlisted.test"}}
		},
	})
	c := fx.client(t)
	status := func(host string) int {
		t.Helper()
		resp, _ := get(t, c, "http://"+host+":"+be.port+"/hello")
		return resp.StatusCode
	}
	if s := status("api.test"); s != http.StatusOK {
		t.Errorf("api.test (allow_out): %d", s)
	}
	if s := status("other.test"); s != http.StatusForbidden {
		t.Errorf("other.test (denied by 0.0.0.0/0): %d", s)
	} else if d := fx.lastDecision(t); d.Allowed || !strings.Contains(d.Reason, "deny_out 0.0.0.0/0") {
		t.Errorf("other.test's decision: %+v", d)
	}
	if s := status("127.0.0.1"); s != http.StatusForbidden {
		t.Errorf("127.0.0.1 (denied): %d", s)
	}
	// allow_out names a host the operator does not list: still refused.
	if s := status("unlisted.test"); s != http.StatusForbidden {
		t.Errorf("unlisted.test: %d, want 403", s)
	} else if d := fx.lastDecision(t); !strings.Contains(d.Reason, "SANDBOX_NETWORK_ALLOW") {
		t.Errorf("unlisted.test's reason: %q", d.Reason)
	}
	target := "other.test:" + be.port
	if resp, _ := raw(t, fx.addr, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT other.test: %d", resp.StatusCode)
	}

	// A bad update keeps the rules in force.
	if err := fx.p.SetRules(NetworkRules{DenyOut: []string{"other.test"}}); err == nil {
		t.Error("SetRules took a name in deny_out")
	}
	if s := status("other.test"); s != http.StatusForbidden {
		t.Errorf("other.test after a refused update: %d", s)
	}
	// Cleared, the operator's list alone applies.
	if err := fx.p.SetRules(NetworkRules{}); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"api.test", "other.test", "127.0.0.1"} {
		if s := status(h); s != http.StatusOK {
			t.Errorf("%s without rules: %d", h, s)
		}
	}
	// A CIDR allow_out entry with a deny-all rule.
	if err := fx.p.SetRules(NetworkRules{DenyOut: []string{AllTraffic}, AllowOut: []string{"127.0.0.0/8"}}); err != nil {
		t.Fatal(err)
	}
	if s := status("other.test"); s != http.StatusOK {
		t.Errorf("other.test within allow_out 127.0.0.0/8: %d", s)
	}
	if be.hits.Load() != 5 {
		t.Errorf("the backend was reached %d times, want 5", be.hits.Load())
	}
}
