package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/e2b/templateplan"
	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

// Sandboxes that outlive their run: pause (resume is connect), snapshots
// that new sandboxes start from, forks. Each is the service's operation of
// the same name; this file only speaks E2B's shapes.

// defaultForkTimeout is E2B's lifetime of a fork when the body names none
// (SandboxForkRequest.timeout's default).
const defaultForkTimeout = 15 * time.Second

// pause answers Sandbox.pause: 204; 409 when it is paused already (the
// SDK returns false); memory false keeps only the files.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Memory *bool `json:"memory"`
	}
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	keep := body.Memory == nil || *body.Memory
	if _, err := s.svc.PauseSession(r.Context(), info.ID, ownerOf(r.Context()), service.PauseMode{KeepMemory: keep}); err != nil {
		s.serviceError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func snapshotOf(sn service.SnapshotInfo) wire.SnapshotInfo {
	out := wire.SnapshotInfo{SnapshotID: sn.ID, Names: []string{}}
	if sn.Name != "" {
		out.Names = append(out.Names, sn.Name)
	}
	return out
}

// snapshot answers Sandbox.createSnapshot: 201 {snapshotID, names}; the
// sandbox keeps running.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	// The name is checked before the sandbox is looked up, as E2B does.
	if err := service.CheckSnapshotName(body.Name); err != nil {
		s.serviceError(w, err)
		return
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	sn, err := s.svc.SnapshotSession(r.Context(), info.ID, ownerOf(r.Context()), body.Name)
	if err != nil {
		s.serviceError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOf(*sn))
}

// listSnapshots answers Sandbox.listSnapshots: the key's snapshots, newest
// first, by sandbox and by name or id, a page at a time (X-Next-Token).
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, offset, ok := pageOf(w, q.Get("limit"), q.Get("nextToken"))
	if !ok {
		return
	}
	list, err := s.svc.ListSnapshots(r.Context(), ownerOf(r.Context()),
		service.SnapshotFilter{SessionID: q.Get("sandboxID"), Name: templateplan.Untagged(q.Get("name"))})
	if err != nil {
		s.serviceError(w, err)
		return
	}
	offset = min(offset, len(list))
	list = list[offset:]
	if len(list) > limit {
		list = list[:limit]
		w.Header().Set("X-Next-Token", strconv.Itoa(offset+limit))
	}
	out := make([]wire.SnapshotInfo, 0, len(list))
	for _, sn := range list {
		out = append(out, snapshotOf(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteSnapshot answers Sandbox.deleteSnapshot (DELETE /templates/{id}):
// 204, or 404 with code 404, which the SDK returns as false. codecage has
// no templates of its own to delete.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := s.svc.DeleteSnapshot(r.Context(), ownerOf(r.Context()), templateplan.Untagged(r.PathValue("id"))); err != nil {
		s.serviceError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork answers Sandbox.fork: 201 with one entry per copy asked for, each
// a sandbox or an error; a paused source is 409, a missing one 404.
func (s *Server) fork(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > service.MaxForks {
		writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("count must be 1 to %d, not %d", service.MaxForks, count))
		return
	}
	lifetime := defaultForkTimeout
	if body.Timeout != nil {
		if *body.Timeout <= 0 || *body.Timeout > int64(24*time.Hour/time.Second) {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("timeout %d s is out of range", *body.Timeout))
			return
		}
		lifetime = time.Duration(*body.Timeout) * time.Second
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	results, err := s.svc.ForkSession(r.Context(), info.ID, ownerOf(r.Context()), count, lifetime)
	if err != nil {
		s.serviceError(w, err)
		return
	}
	key := keyOf(r.Context())
	out := make([]wire.ForkResult, 0, len(results))
	for _, res := range results {
		switch {
		case res.Session != nil:
			c := s.created(res.Session, key)
			out = append(out, wire.ForkResult{Sandbox: &c})
		case res.Error != nil:
			out = append(out, wire.ForkResult{Error: &wire.ForkError{Code: api.StatusOfKind(res.Error.Kind).E2B, Message: res.Error.Message}})
		default:
			out = append(out, wire.ForkResult{Error: &wire.ForkError{Code: http.StatusInternalServerError, Message: "the copy was not started"}})
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

// snapshotFor is the snapshot a create's template names (by id or by
// name, with or without E2B's ":default" tag), or "" when it names none:
// the SDK starts a sandbox from a snapshot by passing its id as the
// template. E2B's own templates never name a snapshot.
func (s *Server) snapshotFor(r *http.Request, template string) (string, error) {
	if profilesFor(template) == nil {
		return "", nil
	}
	name := templateplan.Untagged(template)
	list, err := s.svc.ListSnapshots(r.Context(), ownerOf(r.Context()), service.SnapshotFilter{Name: name})
	if errors.Is(err, service.ErrUnavailable) {
		return "", nil // a server that keeps no snapshots: a profile list
	}
	if err != nil {
		return "", err
	}
	for _, sn := range list {
		if sn.ID == name || sn.Name == name {
			return sn.ID, nil
		}
	}
	return "", nil
}

// pageOf reads a listing's limit (1 to 1000, 100 when absent) and its
// nextToken (an offset this server gave), or answers 400 and false.
func pageOf(w http.ResponseWriter, rawLimit, rawToken string) (limit, offset int, ok bool) {
	limit = 100
	var err error
	if rawLimit != "" {
		if limit, err = strconv.Atoi(rawLimit); err != nil || limit < 1 || limit > 1000 {
			writeAPIError(w, http.StatusBadRequest, "limit must be 1 to 1000")
			return 0, 0, false
		}
	}
	if rawToken != "" {
		if offset, err = strconv.Atoi(rawToken); err != nil || offset < 0 {
			writeAPIError(w, http.StatusBadRequest, "nextToken is not one this server gave")
			return 0, 0, false
		}
	}
	return limit, offset, true
}
