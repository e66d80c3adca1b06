package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strconv"
)

// admit runs the destination check of one request and records the
// decision. It returns the address to dial, or answers the refusal itself
// and returns false.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, host, port string) (netip.AddrPort, bool) {
	t, err := parseTarget(host, port)
	if err != nil {
		d := Decision{Host: truncate(host)}
		d.Port, _ = strconv.Atoi(port)
		p.refuse(w, r, d, http.StatusBadRequest, truncate(err.Error()))
		return netip.AddrPort{}, false
	}
	d := Decision{Host: t.host(), Port: t.port}

	e, ok, portDenied := lookup(p.entries, t)
	if !ok {
		reason := fmt.Sprintf("host %q is not on SANDBOX_NETWORK_ALLOW", t.host())
		if portDenied {
			reason = fmt.Sprintf("port %d of host %q is not on SANDBOX_NETWORK_ALLOW", t.port, t.host())
		}
		p.refuse(w, r, d, http.StatusForbidden, reason)
		return netip.AddrPort{}, false
	}

	addrs := []netip.Addr{t.ip}
	if !t.ip.IsValid() {
		ctx, cancel := context.WithTimeout(r.Context(), p.dialTimeout)
		addrs, err = p.resolver.LookupNetIP(ctx, "ip", t.name)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		if err != nil {
			p.refuse(w, r, d, http.StatusBadGateway, fmt.Sprintf("cannot resolve %q: %v", t.name, err))
			return netip.AddrPort{}, false
		}
	}

	// Take the first address that passes. Addresses that fail are skipped
	// rather than fatal: a name with one stray private record still works
	// through its public ones, and the private ones are never dialed.
	var refusedAddr netip.Addr
	var refusedClass, ruled string
	rules := p.rules.Load()
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		class := addrClass(a)
		if class == classPublic || (e.explicit() && !neverDial[class]) {
			// The operator's policy lets it through; the sandbox's own
			// rules may still take it away.
			if ok, why := rules.allows(t, a); !ok {
				if ruled == "" {
					ruled = why
				}
				continue
			}
			dst := netip.AddrPortFrom(a, uint16(t.port))
			d.Allowed, d.Addr = true, dst.String()
			d.Reason = fmt.Sprintf("allowed by %q", e.String())
			if class != classPublic {
				d.Reason += fmt.Sprintf(" (exact entry; %s address)", class)
			}
			p.record(r, d)
			return dst, true
		}
		if !refusedAddr.IsValid() {
			refusedAddr, refusedClass = a, class
		}
	}
	var reason string
	switch {
	case ruled != "" && !refusedAddr.IsValid():
		reason = fmt.Sprintf("host %q: %s", t.host(), ruled)
	case neverDial[refusedClass]:
		reason = fmt.Sprintf("host %q resolves to %s (%s), which is never reachable",
			t.host(), refusedAddr, refusedClass)
	default:
		reason = fmt.Sprintf("host %q resolves to %s (%s); only an exact (non-wildcard) entry may reach non-public addresses",
			t.host(), refusedAddr, refusedClass)
	}
	p.refuse(w, r, d, http.StatusForbidden, reason)
	return netip.AddrPort{}, false
}

// refuse records a refusal and answers it with a short plain-text reason,
// closing the connection: a client that was refused has nothing more to
// say on it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, d Decision, status int, reason string) {
	d.Allowed, d.Reason, d.Addr = false, reason, ""
	p.record(r, d)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "codecage egress: "+reason+"\n")
}

// maxLoggedRefusals bounds the refusals (and connections over MaxConns)
// one proxy logs line by line.
const maxLoggedRefusals = 32

// record logs a decision (a refusal only within refusedLog) and hands it
// to OnDecision.
func (p *Proxy) record(r *http.Request, d Decision) {
	d.Method = truncate(r.Method)
	level := slog.LevelInfo
	if !d.Allowed {
		level = slog.LevelWarn
	}
	if d.Allowed || p.refusedLog.Take() {
		p.logDecision(r, level, d)
	}
	if p.onDecision != nil {
		p.onDecision(d)
	}
}

func (p *Proxy) logDecision(r *http.Request, level slog.Level, d Decision) {
	p.log.LogAttrs(r.Context(), level, "egress decision",
		slog.String("sandbox", p.label),
		slog.String("method", d.Method),
		slog.String("host", d.Host),
		slog.Int("port", d.Port),
		slog.Bool("allowed", d.Allowed),
		slog.String("reason", d.Reason),
		slog.String("addr", d.Addr),
	)
}

// upstreamFailed answers a request whose checked destination could not be
// reached.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, dst netip.AddrPort, err error) {
	p.log.Warn("egress: upstream failed", "sandbox", p.label, "method", truncate(r.Method),
		"addr", dst.String(), "error", err)
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "codecage egress: cannot reach %s: %v\n", dst, err)
}

// truncate bounds strings taken from requests before they go into logs.
func truncate(s string) string {
	const max = 256
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
