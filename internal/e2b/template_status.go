package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

// A template build runs in the background (service.StartEnvironmentBuild):
// the SDK polls its status and logs, which this file shapes as E2B's.

const statusPageLimit = 100 // E2B's most log entries per status answer

// Build statuses, as E2B names them.
const (
	statusWaiting  = "waiting"
	statusBuilding = "building"
	statusReady    = "ready"
	statusError    = "error"
)

// e2bStatus names a build's state as E2B does.
func e2bStatus(s service.BuildStatus) string {
	switch s.Status {
	case service.BuildBuilding:
		return statusBuilding
	case service.BuildReady:
		return statusReady
	case service.BuildFailed:
		return statusError
	}
	return statusWaiting
}

func (s *Server) templateStatus(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	offset, limit := 0, statusPageLimit
	var err error
	if v := q.Get("logsOffset"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			writeAPIError(w, http.StatusBadRequest, "logsOffset is a number of log entries, 0 or more")
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 0 || limit > statusPageLimit {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("limit is 0 to %d", statusPageLimit))
			return
		}
	}
	b, err := s.svc.EnvironmentBuildStatus(r.Context(), r.PathValue("templateID"), r.PathValue("buildID"), ownerOf(r.Context()), offset, limit)
	if errors.Is(err, service.ErrNotFound) {
		writeAPIError(w, http.StatusNotFound, "template build "+service.Quote(r.PathValue("buildID"))+" not found (this server keeps its last "+strconv.Itoa(service.MaxBuildsKept)+" builds)")
		return
	} else if err != nil {
		s.serviceError(w, err)
		return
	}
	out := wire.BuildInfo{TemplateID: b.Name, BuildID: b.ID, Status: e2bStatus(b), LogEntries: make([]wire.LogEntry, 0, len(b.Logs)), Logs: []string{}}
	for _, e := range b.Logs {
		out.LogEntries = append(out.LogEntries, wire.LogEntry{Timestamp: e.Time, Level: e.Level, Message: e.Message, Step: e.Step})
	}
	if b.Failure != nil {
		out.Reason = &wire.BuildReason{Message: b.Failure.Message, Step: b.Failure.Step, LogEntries: []wire.LogEntry{}}
	}
	writeJSON(w, http.StatusOK, out)
}
