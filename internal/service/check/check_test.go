package check

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service/errdefs"
	"github.com/codecage/codecage/internal/session"
)

// Each check passes a request of the right shape and refuses each wrong
// one as an invalid request, saying what is wrong.
func TestChecksRefuseAsInvalidRequests(t *testing.T) {
	ok := []error{
		Code("print(1)", 100),
		Run(true, "ctx-1.a_b", true, "/home/user", map[string]string{"A_1": "x"}),
		Run(false, "", false, "", nil),
		Session(session.Request{Lifetime: time.Minute, Labels: map[string]string{"team": "a"}}, time.Hour),
		Lifetime(0, time.Now(), time.Hour),
		Language("py", nil, false, true),
		Language("js", []string{"javascript"}, true, false),
	}
	for i, err := range ok {
		if err != nil {
			t.Errorf("good request %d refused: %v", i, err)
		}
	}
	bad := map[string]struct {
		err  error
		want string
	}{
		"code too long":      {Code("print(1)", 4), "the limit is 4"},
		"code not UTF-8":     {Code("ab\xffc", 100), "offset 2"},
		"context outside":    {Run(false, "c", false, "", nil), "for a session's runs"},
		"context name":       {Run(true, "a b", false, "", nil), "context"},
		"cwd with NUL":       {Run(true, "", false, "/a\x00", nil), "cwd"},
		"loader variable":    {Env(map[string]string{"LD_PRELOAD": "x"}), "LD_PRELOAD"},
		"variable name":      {Env(map[string]string{"1A": "x"}), "not valid"},
		"negative lifetime":  {Lifetime(-time.Second, time.Now(), time.Hour), "negative"},
		"lifetime past max":  {Lifetime(2*time.Hour, time.Now(), time.Hour), "SANDBOX_SESSION_MAX_LIFETIME"},
		"session's lifetime": {Session(session.Request{Lifetime: 2 * time.Hour}, time.Hour), "SANDBOX_SESSION_MAX_LIFETIME"},
		"too many labels":    {Session(session.Request{Labels: manyLabels(65)}, time.Hour), "64 labels"},
		"template with NUL":  {Session(session.Request{Template: "a\x00"}, time.Hour), "template"},
		"unknown language":   {Language("cobol", nil, true, false), "kernels: python"},
		"kernel not enabled": {Language("bash", []string{"javascript"}, true, false), "SANDBOX_KERNELS"},
		"kernel outside":     {Language("bash", []string{"bash"}, false, false), "runs in a session"},
		"kernel with tools":  {Language("bash", []string{"bash"}, true, true), "tools are for Python"},
		"session's variable": {Session(session.Request{Env: map[string]string{"PYTHONPATH": "/x"}}, time.Hour), "PYTHONPATH"},
	}
	for name, c := range bad {
		if !errors.Is(c.err, errdefs.ErrInvalidRequest) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want an invalid request naming %q", name, c.err, c.want)
		}
	}
}

func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[strings.Repeat("k", i+1)] = "v"
	}
	return m
}

func TestLogQuery(t *testing.T) {
	for _, q := range []session.LogQuery{{}, {MinLevel: "warn", Search: "x"}} {
		if err := LogQuery(q); err != nil {
			t.Errorf("%+v: %v", q, err)
		}
	}
	for _, q := range []session.LogQuery{{MinLevel: "loud"}, {Search: strings.Repeat("s", 1025)}} {
		if err := LogQuery(q); !errors.Is(err, errdefs.ErrInvalidRequest) {
			t.Errorf("%.40v: %v", q, err)
		}
	}
}
