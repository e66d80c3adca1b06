package e2b

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

func metricOf(m *service.SessionMetrics) wire.SandboxMetric {
	return wire.SandboxMetric{Timestamp: m.Timestamp, TimestampUnix: m.Timestamp.Unix(), CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemUsed: m.MemUsed, MemTotal: m.MemTotal, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal}
}

// sandboxMetrics answers getMetrics: E2B keeps a series sampled every few
// seconds; codecage samples when asked, so the series is that one sample,
// when the asked range (start, end: Unix seconds, as the SDK rounds them)
// overlaps the sandbox's life, and empty otherwise or while it is parked.
func (s *Server) sandboxMetrics(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	start, err1 := unixParam(q.Get("start"))
	end, err2 := unixParam(q.Get("end"))
	if err := errors.Join(err1, err2); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	out := []wire.SandboxMetric{}
	now := time.Now()
	// A second's slack on each side: the SDK rounds to whole seconds.
	if (end.IsZero() || !end.Before(info.CreatedAt.Add(-time.Second))) && (start.IsZero() || !start.After(now.Add(time.Second))) {
		m, err := s.svc.SessionMetrics(r.Context(), info.ID, ownerOf(r.Context()))
		switch {
		case errors.Is(err, service.ErrSessionPaused):
		case err != nil:
			s.serviceError(w, err)
			return
		default:
			out = append(out, metricOf(m))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listMetrics answers GET /sandboxes/metrics?sandbox_ids=a,b: E2B's
// SandboxesWithMetrics, the latest sample of each of the key's running
// sandboxes named (others are left out, as E2B's).
func (s *Server) listMetrics(w http.ResponseWriter, r *http.Request) {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 || len(ids) > 100 {
		writeAPIError(w, http.StatusBadRequest, "sandbox_ids must name 1 to 100 sandboxes")
		return
	}
	out := map[string]wire.SandboxMetric{}
	for _, id := range ids {
		info, err := s.svc.GetSession(r.Context(), id, ownerOf(r.Context()))
		if err != nil || info.Template == "" {
			continue
		}
		if m, err := s.svc.SessionMetrics(r.Context(), id, ownerOf(r.Context())); err == nil {
			out[id] = metricOf(m)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

func unixParam(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, errors.New("start and end must be Unix times in seconds")
	}
	return time.Unix(n, 0), nil
}
