package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codecage/codecage/internal/fleet"
)

// Service is what the metrics read from the service (a
// *service.Service) at each scrape.
type Service interface {
	PoolStats() map[string]fleet.PoolStats
	Budget() fleet.BudgetStats
	SessionCount() int
	SessionIdleCPU() time.Duration
	Running() int
	Waiting() int
}

// serviceCollector reads the service's pools, sessions and queue at each
// scrape, so that the gauges are never stale.
type serviceCollector struct {
	svc Service
}

var (
	poolReady    = prometheus.NewDesc("sandbox_pool_ready", "Sandboxes waiting ready, by class.", []string{"class"}, nil)
	poolInUse    = prometheus.NewDesc("sandbox_pool_in_use", "Pooled sandboxes running an execution, by class.", []string{"class"}, nil)
	poolCreating = prometheus.NewDesc("sandbox_pool_creating", "Sandboxes being started for the pool, by class.", []string{"class"}, nil)
	poolWaiting  = prometheus.NewDesc("sandbox_pool_waiting", "Requests waiting for a pooled sandbox, by class.", []string{"class"}, nil)
	poolHits     = prometheus.NewDesc("sandbox_pool_hits_total", "Executions that found a ready sandbox, by class.", []string{"class"}, nil)
	poolMisses   = prometheus.NewDesc("sandbox_pool_misses_total", "Executions that had to wait for a sandbox to start, by class.", []string{"class"}, nil)
	poolBusy     = prometheus.NewDesc("sandbox_pool_busy_total", "Executions refused because every sandbox was busy, by class.", []string{"class"}, nil)
	budgetMax    = prometheus.NewDesc("sandbox_budget_slots", "Sandboxes that may exist at once (SANDBOX_MAX_SANDBOXES).", nil, nil)
	budgetInUse  = prometheus.NewDesc("sandbox_budget_in_use", "Sandboxes that exist: running, starting, ready in a pool, or held by a session.", nil, nil)
	budgetWait   = prometheus.NewDesc("sandbox_budget_waiting", "Requests queued for a sandbox because all exist.", nil, nil)
	budgetBusy   = prometheus.NewDesc("sandbox_budget_busy_total", "Requests refused because no sandbox freed up within the queue timeout.", nil, nil)
	sessionsOpen = prometheus.NewDesc("sandbox_sessions", "Sessions open.", nil, nil)
	sessionIdle  = prometheus.NewDesc("sandbox_session_idle_cpu_seconds_total", "CPU time sessions spent while no request ran in them (background threads and processes), counted at their next request, restart or close.", nil, nil)
	running      = prometheus.NewDesc("sandbox_requests_running", "Requests holding a concurrency slot.", nil, nil)
	queueDepth   = prometheus.NewDesc("sandbox_queue_depth", "Requests waiting for a concurrency slot.", nil, nil)
)

func (c *serviceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolReady, poolInUse, poolCreating, poolWaiting, poolHits, poolMisses, poolBusy, budgetMax, budgetInUse, budgetWait, budgetBusy, sessionsOpen, sessionIdle, running, queueDepth} {
		ch <- d
	}
}

func (c *serviceCollector) Collect(ch chan<- prometheus.Metric) {
	for class, st := range c.svc.PoolStats() {
		ch <- prometheus.MustNewConstMetric(poolReady, prometheus.GaugeValue, float64(st.Ready), class)
		ch <- prometheus.MustNewConstMetric(poolInUse, prometheus.GaugeValue, float64(st.InUse), class)
		ch <- prometheus.MustNewConstMetric(poolCreating, prometheus.GaugeValue, float64(st.Creating), class)
		ch <- prometheus.MustNewConstMetric(poolWaiting, prometheus.GaugeValue, float64(st.Waiting), class)
		ch <- prometheus.MustNewConstMetric(poolHits, prometheus.CounterValue, float64(st.Hits), class)
		ch <- prometheus.MustNewConstMetric(poolMisses, prometheus.CounterValue, float64(st.Misses), class)
		ch <- prometheus.MustNewConstMetric(poolBusy, prometheus.CounterValue, float64(st.Busy), class)
	}
	b := c.svc.Budget()
	ch <- prometheus.MustNewConstMetric(budgetMax, prometheus.GaugeValue, float64(b.Max))
	ch <- prometheus.MustNewConstMetric(budgetInUse, prometheus.GaugeValue, float64(b.InUse))
	ch <- prometheus.MustNewConstMetric(budgetWait, prometheus.GaugeValue, float64(b.Waiting))
	ch <- prometheus.MustNewConstMetric(budgetBusy, prometheus.CounterValue, float64(b.Busy))
	ch <- prometheus.MustNewConstMetric(sessionsOpen, prometheus.GaugeValue, float64(c.svc.SessionCount()))
	ch <- prometheus.MustNewConstMetric(sessionIdle, prometheus.CounterValue, c.svc.SessionIdleCPU().Seconds())
	ch <- prometheus.MustNewConstMetric(running, prometheus.GaugeValue, float64(c.svc.Running()))
	ch <- prometheus.MustNewConstMetric(queueDepth, prometheus.GaugeValue, float64(c.svc.Waiting()))
}
