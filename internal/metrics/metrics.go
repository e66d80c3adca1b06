// Package metrics exposes the service to Prometheus on its own registry:
// executions by profile and outcome, durations, errors, limits hit,
// security events, pools, sessions, queues and refused requests. It learns
// of executions as a service.Observer, so every surface is counted alike.
package metrics

import (
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// Metrics is the service's registry and its instruments.
type Metrics struct {
	reg        *prometheus.Registry
	executions *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	validates  *prometheus.CounterVec
	installs   *prometheus.CounterVec
	commands   *prometheus.CounterVec
	toolCalls  *prometheus.CounterVec
	errors     *prometheus.CounterVec
	limits     *prometheus.CounterVec
	security   *prometheus.CounterVec
	sessionOps *prometheus.CounterVec
	denied     *prometheus.CounterVec
	requests   *prometheus.CounterVec
	refused    *prometheus.CounterVec
}

// New registers the instruments, and gauges read from svc at each scrape.
func New(svc Service) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	m.executions = counter("sandbox_executions_total", "Executions by profile, backend (native, gvisor; none when it could not run) and outcome (success, error, a limit, crash, or why it could not run).", "profile", "backend", "outcome")
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandbox_execution_duration_seconds",
		Help:    "Time from request to result of executions that ran, by profile and backend.",
		Buckets: []float64{.0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"profile", "backend"})
	m.reg.MustRegister(m.duration)
	m.validates = counter("sandbox_validations_total", "validate_code requests by outcome.", "outcome")
	m.toolCalls = counter("sandbox_tool_calls_total", "Upstream tool calls made by code (code mode), by tool and outcome.", "tool", "outcome")
	m.commands = counter("sandbox_commands_total", "run_command requests by outcome.", "outcome")
	m.installs = counter("sandbox_package_installs_total", "Package installs by outcome.", "outcome")
	m.errors = counter("sandbox_errors_total", "Failed requests and executions by type.", "type")
	m.limits = counter("sandbox_limits_hit_total", "Executions stopped by a limit, by kind (timeout, cpu, memory, output, canceled).", "kind")
	m.security = counter("sandbox_security_events_total", "Attempts the policy refused, by kind (import_denied, egress_denied, seccomp_kill).", "kind")
	m.sessionOps = counter("sandbox_session_operations_total", "Session and workspace file operations by action and outcome.", "action", "outcome")
	m.denied = counter("sandbox_requests_denied_total", "Requests refused before any work, by reason (unauthorized, rate_limited, busy, too_large, shutting_down).", "reason")
	m.requests = counter("sandbox_http_requests_total", "HTTP requests by route and status code.", "route", "code")
	m.refused = counter("sandbox_connections_refused_total", "Connections closed as soon as accepted, by listener and reason (listener_full, client_full: SANDBOX_MAX_CONNECTIONS, SANDBOX_MAX_CONNECTIONS_PER_CLIENT).", "listener", "reason")
	m.reg.MustRegister(&serviceCollector{svc: svc})
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the metrics' registry, for collectors of other packages.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Denied counts a request refused before it reached the service (a bad
// or missing API key, an oversized body).
func (m *Metrics) Denied(reason string) { m.denied.WithLabelValues(reason).Inc() }

// ConnectionRefused counts a connection over a listener's cap.
func (m *Metrics) ConnectionRefused(listener, reason string) {
	m.refused.WithLabelValues(listener, reason).Inc()
}

// OpenConnections exports the connections open on a listener, read at
// each scrape.
func (m *Metrics) OpenConnections(listener string, open func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandbox_connections_open",
		Help: "Connections open on a listener.", ConstLabels: prometheus.Labels{"listener": listener}},
		func() float64 { return float64(open()) }))
}

// HTTPRequest counts an answered HTTP request; route is its pattern, so
// the label stays bounded.
func (m *Metrics) HTTPRequest(route string, code int) {
	m.requests.WithLabelValues(route, statusLabel(code)).Inc()
}

// Observe counts one of the service's events.
func (m *Metrics) Observe(ev service.Event) {
	ran := !isRefusal(ev.Outcome)
	if !ran {
		m.errors.WithLabelValues(ev.Outcome).Inc()
		switch ev.Outcome {
		case service.KindRateLimited, service.KindBusy, service.KindShuttingDown:
			m.denied.WithLabelValues(ev.Outcome).Inc()
		}
	}
	switch ev.Kind {
	case service.EventExecute:
		profile, backend := profileLabel(ev.Profile), ev.Backend
		if backend == "" {
			backend = "none"
		}
		m.executions.WithLabelValues(profile, backend, ev.Outcome).Inc()
		if ran {
			m.duration.WithLabelValues(profile, backend).Observe(ev.Duration.Seconds())
			if ev.Outcome != "success" {
				m.errors.WithLabelValues(ev.Outcome).Inc()
			}
		}
	case service.EventValidate:
		m.validates.WithLabelValues(ev.Outcome).Inc()
	case service.EventSession, service.EventFile:
		m.sessionOps.WithLabelValues(ev.Kind+"_"+ev.Action, outcomeLabel(ev.Outcome)).Inc()
	case service.EventToolCall:
		tool := ev.Code
		if ev.Outcome == "denied" || ev.Outcome == "budget" {
			tool = "(refused)" // maybe a name the code made up: keep the label bounded
		}
		m.toolCalls.WithLabelValues(tool, ev.Outcome).Inc()
	case service.EventCommand:
		m.commands.WithLabelValues(ev.Outcome).Inc()
		if ran && ev.Outcome != "success" {
			m.errors.WithLabelValues("command_" + ev.Outcome).Inc()
		}
	case service.EventInstall:
		m.installs.WithLabelValues(ev.Outcome).Inc()
	}
	if ev.Limit != "" {
		m.limits.WithLabelValues(ev.Limit).Inc()
	}
	for _, s := range ev.SecurityEvents {
		kind, _, _ := strings.Cut(s, ":")
		m.security.WithLabelValues(kind).Inc()
	}
}

// refusals are the outcomes of requests that never ran.
var refusals = []string{
	service.KindInvalidRequest, service.KindBadPath, service.KindFileNotFound, service.KindTooLarge,
	service.KindSessionNotFound, service.KindSessionEnded, service.KindTooManySessions, service.KindKeyLimit,
	service.KindSessionPaused, service.KindSnapshotNotFound, service.KindSnapshotUnusable, service.KindPortClosed,
	service.KindForbidden, service.KindEnvironmentNotFound, service.KindEnvironmentExists,
	service.KindRateLimited, service.KindBusy, service.KindUnavailable, service.KindShuttingDown,
	service.KindCanceled, service.KindInternal,
}

func isRefusal(outcome string) bool { return slices.Contains(refusals, outcome) }

// profileLabel keeps the label bounded: the known profiles in the request,
// joined with +, whatever the client sent.
func profileLabel(p string) string {
	var out []string
	for _, name := range policy.ProfileNames() {
		for _, f := range strings.FieldsFunc(p, func(r rune) bool { return r == ',' || r == '+' || r == ' ' }) {
			if f == name && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	if len(out) == 0 {
		return "default"
	}
	return strings.Join(out, "+")
}

func outcomeLabel(o string) string {
	if o == "success" || isRefusal(o) {
		return o
	}
	return "error"
}

func statusLabel(code int) string {
	const digits = "0123456789"
	if code < 100 || code > 999 {
		return "other"
	}
	return string([]byte{digits[code/100], digits[code/10%10], digits[code%10]})
}

// AuditCounters exports the audit recorder's counters: events written,
// dropped because the buffer was full, and store errors.
func (m *Metrics) AuditCounters(written, dropped, errors func() uint64) {
	for _, c := range []struct {
		name, help string
		f          func() uint64
	}{
		{"sandbox_audit_events_written_total", "Audit events written to the store.", written},
		{"sandbox_audit_events_dropped_total", "Audit events dropped because the buffer was full (each drop is also recorded in the log as audit_dropped).", dropped},
		{"sandbox_audit_errors_total", "Audit store write errors.", errors},
	} {
		f := c.f
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, func() float64 { return float64(f()) }))
	}
}
