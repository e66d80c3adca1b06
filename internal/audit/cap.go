package audit

import (
	"strconv"

	"github.com/codecage/codecage/internal/bounded"
)

// What one event may hold, whoever filled it in: the last line of defence
// against values sandboxed code or a client chose (names, hosts, paths,
// messages) filling the database. A longer value keeps its start, an
// ellipsis and its length.
const (
	// MaxField bounds the short fields: kind, ids, key, surface,
	// profile, outcome, limit, address, backend, replica, and each
	// security event.
	MaxField = 256
	// MaxDetail bounds the detail: an error message or a reason.
	MaxDetail = 4 << 10
	// MaxSecurityEvents bounds the security events of one event; the last
	// kept entry says how many more there were.
	MaxSecurityEvents = 64
	// DefaultMaxCode bounds the code when the recorder was not told the
	// largest code the server accepts (SANDBOX_MAX_CODE_SIZE's default).
	DefaultMaxCode = 4 << 20
)

// capEvent returns ev with every string within the bounds above and its
// code within maxCode bytes. The code hash, computed before, still
// identifies the whole code.
func capEvent(ev Event, maxCode int) Event {
	if fits(&ev, maxCode) {
		return ev
	}
	for _, f := range []*string{&ev.Kind, &ev.ExecutionID, &ev.Key, &ev.Surface, &ev.Profile,
		&ev.CodeHash, &ev.Outcome, &ev.Limit, &ev.RemoteAddr, &ev.Backend, &ev.Replica} {
		*f = bounded.String(*f, MaxField)
	}
	ev.Detail = bounded.String(ev.Detail, MaxDetail)
	ev.Code = bounded.String(ev.Code, maxCode)
	if !securityEventsFit(ev.SecurityEvents) {
		// A copy: the caller's slice may be shared with other observers.
		n := min(len(ev.SecurityEvents), MaxSecurityEvents)
		out := make([]string, n)
		for i, s := range ev.SecurityEvents[:n] {
			out[i] = bounded.String(s, MaxField)
		}
		if more := len(ev.SecurityEvents) - n; more > 0 {
			out[n-1] = "… and " + strconv.Itoa(more+1) + " more"
		}
		ev.SecurityEvents = out
	}
	return ev
}

func securityEventsFit(evs []string) bool {
	if len(evs) > MaxSecurityEvents {
		return false
	}
	for _, s := range evs {
		if len(s) > MaxField {
			return false
		}
	}
	return true
}

// fits reports whether ev is within every bound, the common case.
func fits(ev *Event, maxCode int) bool {
	return max(len(ev.Kind), len(ev.ExecutionID), len(ev.Key), len(ev.Surface), len(ev.Profile), len(ev.CodeHash),
		len(ev.Outcome), len(ev.Limit), len(ev.RemoteAddr), len(ev.Backend), len(ev.Replica)) <= MaxField &&
		len(ev.Detail) <= MaxDetail && len(ev.Code) <= maxCode && securityEventsFit(ev.SecurityEvents)
}
