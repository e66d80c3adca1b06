package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/api"
	"github.com/codecage/codecage/internal/service"
)

// Home is where an E2B sandbox's workspace is, as in E2B's VMs.
const Home = "/home/user"

// defaultTimeout is E2B's sandbox lifetime when create names none.
const defaultTimeout = 300 * time.Second

func (s *Server) controlRoutes() {
	m := s.control
	m.HandleFunc("POST /v2/sandboxes", s.create)
	m.HandleFunc("POST /sandboxes", s.create)
	m.HandleFunc("GET /v2/sandboxes", s.list)
	m.HandleFunc("GET /sandboxes", s.list)
	m.HandleFunc("GET /sandboxes/{id}", s.get)
	m.HandleFunc("DELETE /sandboxes/{id}", s.kill)
	m.HandleFunc("POST /sandboxes/{id}/timeout", s.setTimeout)
	m.HandleFunc("POST /v2/sandboxes/{id}/connect", s.connect)
	m.HandleFunc("POST /sandboxes/{id}/connect", s.connect)
	m.HandleFunc("POST /sandboxes/{id}/resume", s.connect)
	for _, p := range []string{"POST /sandboxes/{id}/pause", "GET /sandboxes/{id}/metrics", "GET /sandboxes/{id}/logs", "POST /sandboxes/{id}/fork",
		"POST /sandboxes/{id}/snapshots", "PUT /sandboxes/{id}/network", "POST /sandboxes/{id}/refreshes"} {
		m.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			writeAPIError(w, http.StatusNotImplemented, r.Method+" "+r.URL.Path+": codecage sandboxes cannot be paused, forked, snapshotted or metered per sandbox (see /metrics of the server)")
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "no such route in codecage's E2B API: "+r.Method+" "+r.URL.Path)
	})
}

// newSandbox is E2B's NewSandbox body (the fields codecage honours).
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int64            `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
}

// sandboxCreated is E2B's Sandbox: what create and connect answer.
type sandboxCreated struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// sandboxDetail is E2B's SandboxDetail and ListedSandbox.
type sandboxDetail struct {
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	SandboxID       string            `json:"sandboxID"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	Domain          *string           `json:"domain"`
}

// profilesFor maps an E2B template to codecage profiles: E2B's own
// templates get the operator's default profiles; any other name is a
// profile list ("data_science+network").
func profilesFor(template string) []string {
	switch template {
	case "", "base", "code-interpreter-v1", "code-interpreter", "code-interpreter-stateful", "desktop":
		return nil
	}
	return strings.FieldsFunc(template, func(r rune) bool { return r == '+' || r == ',' })
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var body newSandbox
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if body.TemplateID == "" {
		body.TemplateID = "base"
	}
	lifetime := defaultTimeout
	if body.Timeout != nil {
		if *body.Timeout <= 0 || *body.Timeout > int64(24*time.Hour/time.Second) {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("timeout %d s is out of range", *body.Timeout))
			return
		}
		lifetime = time.Duration(*body.Timeout) * time.Second
	}
	info, err := s.svc.CreateSession(r.Context(), service.SessionRequest{
		Owner: ownerOf(r.Context()), Profiles: profilesFor(body.TemplateID), Home: Home, Env: body.EnvVars,
		Lifetime: lifetime, Labels: body.Metadata, Template: body.TemplateID,
	})
	if err != nil {
		s.serviceError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.created(info, keyOf(r.Context())))
}

// created answers a new or resumed sandbox, with the access token of the
// key that asked.
func (s *Server) created(info *service.SessionInfo, key string) sandboxCreated {
	token := s.tokens.issue(info.ID, key)
	return sandboxCreated{TemplateID: info.Template, SandboxID: info.ID, ClientID: "codecage", EnvdVersion: EnvdVersion,
		EnvdAccessToken: token, TrafficAccessToken: token}
}

func (s *Server) detail(info service.SessionInfo) sandboxDetail {
	cfg := s.svc.Config()
	md := info.Labels
	if md == nil {
		md = map[string]string{}
	}
	return sandboxDetail{TemplateID: info.Template, SandboxID: info.ID, ClientID: "codecage", StartedAt: info.CreatedAt.UTC(),
		EndAt: info.ExpiresAt.UTC(), EnvdVersion: EnvdVersion, CPUCount: 1, MemoryMB: cfg.MemoryLimit >> 20,
		DiskSizeMB: cfg.WorkspaceMax >> 20, Metadata: md, State: "running"}
}

// session returns the owner's E2B sandbox id, or answers 404 and false.
func (s *Server) session(w http.ResponseWriter, r *http.Request) (*service.SessionInfo, bool) {
	info, err := s.svc.GetSession(r.Context(), r.PathValue("id"), ownerOf(r.Context()))
	if err == nil && info.Template == "" {
		err = service.ErrSessionNotFound // a session of the other surfaces
	}
	if err != nil {
		s.serviceError(w, err)
		return nil, false
	}
	return info, true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	if info, ok := s.session(w, r); ok {
		d := s.detail(*info)
		d.EnvdAccessToken = s.tokens.issue(info.ID, keyOf(r.Context()))
		writeJSON(w, http.StatusOK, d)
	}
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.session(w, r); !ok {
		return
	}
	id := r.PathValue("id")
	if err := s.svc.CloseSession(r.Context(), id, ownerOf(r.Context())); err != nil {
		s.serviceError(w, err)
		return
	}
	s.boxes.drop(id)
	w.WriteHeader(http.StatusNoContent)
}

type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil || body.Timeout == nil || *body.Timeout <= 0 {
		writeAPIError(w, http.StatusBadRequest, "the body must be {\"timeout\": <seconds, more than 0>}")
		return
	}
	if _, ok := s.session(w, r); !ok {
		return
	}
	if _, err := s.svc.SetSessionLifetime(r.Context(), r.PathValue("id"), ownerOf(r.Context()), time.Duration(*body.Timeout)*time.Second); err != nil {
		s.serviceError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect hands a running sandbox to another client of the same key;
// a timeout in the body moves its end, as E2B's does.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	var body timeoutBody
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	if body.Timeout != nil && *body.Timeout > 0 {
		if _, err := s.svc.SetSessionLifetime(r.Context(), info.ID, ownerOf(r.Context()), time.Duration(*body.Timeout)*time.Second); err != nil {
			s.serviceError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, s.created(info, keyOf(r.Context())))
}

// list answers Sandbox.list: the key's running sandboxes, filtered by
// metadata and state, a page at a time (X-Next-Token).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if st := q.Get("state"); st != "" && !strings.Contains(st, "running") {
		writeJSON(w, http.StatusOK, []sandboxDetail{}) // nothing is ever paused here
		return
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 1000 {
			writeAPIError(w, http.StatusBadRequest, "limit must be 1 to 1000")
			return
		}
	}
	offset := 0
	if v := q.Get("nextToken"); v != "" {
		if offset, err = strconv.Atoi(v); err != nil || offset < 0 {
			writeAPIError(w, http.StatusBadRequest, "nextToken is not one this server gave")
			return
		}
	}
	out := []sandboxDetail{}
	for _, info := range s.svc.ListSessions(r.Context(), ownerOf(r.Context())) {
		if info.Template == "" || (q.Get("template") != "" && q.Get("template") != info.Template) || !matches(info.Labels, want) {
			continue
		}
		out = append(out, s.detail(info))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	if q.Get("order") == "desc" {
		sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.After(out[j].StartedAt) })
	}
	if offset > len(out) {
		offset = len(out)
	}
	out = out[offset:]
	if len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", strconv.Itoa(offset+limit))
	}
	writeJSON(w, http.StatusOK, out)
}

// metadataFilter reads the list's metadata query: key=value pairs, each
// part escaped once more by the SDK.
func metadataFilter(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	pairs, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("metadata filter: %v", err)
	}
	out := map[string]string{}
	for k, vs := range pairs {
		key, err1 := url.QueryUnescape(k)
		val, err2 := url.QueryUnescape(vs[0])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("metadata filter: %v", err)
		}
		out[key] = val
	}
	return out, nil
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// decodeBody reads an optional JSON body (admitBody bounded and checked
// it).
func decodeBody(r *http.Request, v any) error {
	if r.Body == nil {
		return nil
	}
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(v); err != nil && err.Error() != "EOF" {
		return fmt.Errorf("the body is not the JSON this call takes: %v", err)
	}
	return nil
}

// serviceError answers a control-plane call the service refused.
func (s *Server) serviceError(w http.ResponseWriter, err error) {
	st := api.StatusOf(err)
	if st.E2BRetry {
		w.Header().Set("Retry-After", strconv.Itoa(api.RetryAfter(err)))
	}
	writeAPIError(w, st.E2B, err.Error())
}
