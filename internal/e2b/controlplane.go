package e2b

import (
	"cmp"
	"context"
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
	"github.com/codecage/codecage/internal/e2b/templateplan"
	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service"
)

// Home is where an E2B sandbox's workspace is, as in E2B's VMs (the
// service's: its machine spares are started there).
const Home = service.E2BHome

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
	m.HandleFunc("POST /sandboxes/{id}/pause", s.pause)
	m.HandleFunc("POST /sandboxes/{id}/fork", s.fork)
	m.HandleFunc("POST /sandboxes/{id}/snapshots", s.snapshot)
	m.HandleFunc("GET /snapshots", s.listSnapshots)
	m.HandleFunc("DELETE /templates/{id}", s.deleteTemplate)
	m.HandleFunc("GET /templates/aliases/{alias}", s.templateAlias)
	s.templateRoutes()
	m.HandleFunc("GET /sandboxes/{id}/metrics", s.sandboxMetrics)
	m.HandleFunc("GET /sandboxes/metrics", s.listMetrics)
	m.HandleFunc("POST /sandboxes/{id}/refreshes", s.refresh)
	m.HandleFunc("GET /sandboxes/{id}/logs", s.sandboxLogs)
	m.HandleFunc("GET /v2/sandboxes/{id}/logs", s.sandboxLogs)
	m.HandleFunc("PUT /sandboxes/{id}/network", s.updateNetwork)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "no such route in codecage's E2B API: "+r.Method+" "+r.URL.Path)
	})
}

// profilesFor maps an E2B template to codecage profiles: E2B's own
// templates get the operator's default profiles; any other name is a
// profile list ("data_science+network"). "desktop" is accepted as the
// default too, but codecage has no desktop, so it is no alias.
func profilesFor(template string) []string {
	if template == "" || template == "desktop" || templateplan.Builtin(template) {
		return nil
	}
	return strings.FieldsFunc(template, func(r rune) bool { return r == '+' || r == ',' })
}

// unknownTemplate: the template, read as a profile list, is one name
// that is no profile either. E2B answers a template it does not know with
// 404, as REST and MCP answer an unknown environment; a list of profiles
// ("data_science+nope") stays a bad request naming the one unknown.
func unknownTemplate(profiles []string) bool {
	if len(profiles) != 1 {
		return false
	}
	_, ok := policy.LookupProfile(profiles[0])
	return !ok
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var body newSandbox
	if err := decodeCreate(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if why := refusedFields(&body); why != "" {
		writeAPIError(w, http.StatusBadRequest, why)
		return
	}
	asked, ok := s.askedGateway(w, &body)
	if !ok {
		return
	}
	creds, err := checkedRules(cmp.Or(body.Network, &networkConfig{}).Rules)
	if err != nil {
		s.serviceError(w, err)
		return
	}
	body.TemplateID = mcpTemplateOf(body.TemplateID)
	if body.TemplateID == "" {
		body.TemplateID = "base"
	}
	autoResume := body.AutoResume != nil && body.AutoResume.Enabled
	if autoResume && !body.AutoPause {
		writeAPIError(w, http.StatusBadRequest, "autoResume needs autoPause: only a sandbox its timeout pauses can be resumed by traffic")
		return
	}
	onTimeout := "kill"
	if body.AutoPause {
		onTimeout = "pause"
		if body.AutoPauseMemory != nil && !*body.AutoPauseMemory {
			onTimeout = "pause_files"
		}
	}
	snap, err := s.snapshotFor(r, body.TemplateID)
	if err != nil {
		s.serviceError(w, err)
		return
	}
	profiles := profilesFor(body.TemplateID)
	env := ""
	if snap == "" {
		env = s.templateEnv(r, body.TemplateID)
	}
	if snap != "" || env != "" {
		profiles = nil // the snapshot's own, or the operator's defaults in an environment
	}
	if unknownTemplate(profiles) {
		s.serviceError(w, fmt.Errorf("%w: template %s: no environment, snapshot or profile of this server has that name",
			service.ErrEnvironmentNotFound, service.Quote(body.TemplateID)))
		return
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
		Owner: ownerOf(r.Context()), Profiles: profiles, Home: Home, Env: body.EnvVars,
		Lifetime: lifetime, Labels: body.Metadata, Template: body.TemplateID,
		// E2B's default is a manual resume: traffic to a paused sandbox
		// answers 502 and does not wake it.
		OnTimeout: onTimeout, ManualResume: !autoResume, FromSnapshot: snap, Environment: env,
		// E2B programs serve on their sandbox's ports (getHost).
		Servers:       true,
		PublicTraffic: cmp.Or(body.Network, &networkConfig{}).publicTraffic(s.cfg.E2BPublicTraffic),
		Network:       createEgress(&body),
		Machine:       s.svc.OffersMachines(false), // a computer, as on E2B (docs/sessions.md)
	})
	if err != nil {
		s.serviceError(w, err)
		return
	}
	if err := s.outsideTheSandbox(r, info.ID, creds, asked); err != nil {
		_ = s.svc.CloseSession(r.Context(), info.ID, ownerOf(r.Context()))
		s.serviceError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.created(info, keyOf(r.Context())))
}

// outsideTheSandbox gives a new sandbox what its create asked for that
// lives outside it: its network rules' header values, its MCP gateway.
func (s *Server) outsideTheSandbox(r *http.Request, id string, creds []service.InlineCredential, asked map[string]map[string]any) error {
	if len(creds) > 0 {
		if err := s.svc.SetSandboxCredentials(r.Context(), id, ownerOf(r.Context()), creds); err != nil {
			return err
		}
	}
	if asked != nil {
		return s.svc.OpenGateway(r.Context(), id, ownerOf(r.Context()), asked)
	}
	return nil
}

// created answers a new or resumed sandbox, with the access tokens of the
// key that asked: the daemon's, and the ports' (which opens nothing else).
func (s *Server) created(info *service.SessionInfo, key string) wire.SandboxCreated {
	return wire.SandboxCreated{TemplateID: info.Template, SandboxID: info.ID, ClientID: "codecage", EnvdVersion: EnvdVersion,
		EnvdAccessToken: s.tokens.issue(info.ID, key), TrafficAccessToken: s.tokens.traffic(info.ID, key), Domain: s.domainOf()}
}

func (s *Server) detail(info service.SessionInfo) wire.SandboxDetail {
	md := info.Labels
	if md == nil {
		md = map[string]string{}
	}
	return wire.SandboxDetail{TemplateID: info.Template, SandboxID: info.ID, ClientID: "codecage", StartedAt: info.CreatedAt.UTC(),
		EndAt: info.ExpiresAt.UTC(), EnvdVersion: EnvdVersion, CPUCount: 1, MemoryMB: s.cfg.MemoryLimit >> 20,
		DiskSizeMB: s.cfg.WorkspaceMax >> 20, Metadata: md, State: stateOf(info),
		Lifecycle: &wire.Lifecycle{OnTimeout: e2bOnTimeout(info.OnTimeout), AutoResume: info.AutoResume}, Domain: s.domainOf()}
}

// domainOf is the domain create and get announce: where getHost's hosts
// are (null without one, as E2B's for its default domain).
func (s *Server) domainOf() *string {
	if s.domain == "" {
		return nil
	}
	d := s.domain
	return &d
}

// stateOf is E2B's state of a sandbox: "running" or "paused".
func stateOf(info service.SessionInfo) string {
	if info.State == "paused" {
		return "paused"
	}
	return "running"
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
		d.EnvdAccessToken, d.Network = s.tokens.issue(info.ID, keyOf(r.Context())), networkOf(*info)
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
	w.WriteHeader(http.StatusNoContent)
}

// setTimeout moves a sandbox's end to timeout seconds from now; 0 ends
// its timeout now, so that it does what its timeout does (ends, or
// pauses with autoPause), as E2B's SDK tests use it.
func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var body wire.TimeoutBody
	if err := decodeBody(r, &body); err != nil || body.Timeout == nil || *body.Timeout < 0 {
		writeAPIError(w, http.StatusBadRequest, "the body must be {\"timeout\": <seconds, 0 or more>}")
		return
	}
	if _, ok := s.session(w, r); !ok {
		return
	}
	// The service's lifetimes are positive: "now" is a millisecond away.
	d := max(time.Duration(*body.Timeout)*time.Second, time.Millisecond)
	if _, err := s.svc.SetSessionLifetime(r.Context(), r.PathValue("id"), ownerOf(r.Context()), d); err != nil {
		s.serviceError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// refresh is E2B's keep-alive: the sandbox lives at least duration
// seconds (0 to 3600) from now; it is never shortened.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Duration *int64 `json:"duration"`
	}
	if err := decodeBody(r, &body); err != nil || (body.Duration != nil && (*body.Duration < 0 || *body.Duration > 3600)) {
		writeAPIError(w, http.StatusBadRequest, "the body must be {\"duration\": <seconds, 0 to 3600>}")
		return
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	if body.Duration != nil {
		if err := s.lifeAtLeast(r.Context(), info, time.Duration(*body.Duration)*time.Second, false); err != nil {
			s.serviceError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect hands a sandbox to another client of the same key: a paused
// one is resumed (201) with the timeout from now; a running one (200)
// lives at least the timeout from now, never less than it had, as E2B's.
func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	var body wire.ConnectBody
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	d := defaultTimeout // E2B: an omitted timeout is 300 s
	if body.Timeout != nil {
		if *body.Timeout < 0 || *body.Timeout > int64(24*time.Hour/time.Second) {
			writeAPIError(w, http.StatusBadRequest, fmt.Sprintf("timeout %d s is out of range", *body.Timeout))
			return
		}
		if *body.Timeout > 0 {
			d = time.Duration(*body.Timeout) * time.Second
		}
	}
	info, ok := s.session(w, r)
	if !ok {
		return
	}
	ctx, owner := r.Context(), ownerOf(r.Context())
	status := http.StatusOK
	if info.State == "paused" {
		resumed, _, err := s.svc.ResumeSession(ctx, info.ID, owner)
		if err != nil {
			s.serviceError(w, err)
			return
		}
		if body.Memory != nil && !*body.Memory {
			// onResume 'reboot': the files stay, the interpreter and
			// its processes start afresh, as E2B's cold boot.
			s.endProcesses(ctx, info.ID, owner)
			if resumed, err = s.svc.RestartSession(ctx, info.ID, owner); err != nil {
				s.serviceError(w, err)
				return
			}
		}
		info, status = resumed, http.StatusCreated
		if err := s.lifeAtLeast(ctx, info, d, true); err != nil {
			s.serviceError(w, err)
			return
		}
	} else if err := s.lifeAtLeast(ctx, info, d, false); err != nil {
		s.serviceError(w, err)
		return
	}
	writeJSON(w, status, s.created(info, keyOf(ctx)))
}

// lifeAtLeast makes a sandbox live d from now (within the longest life
// the server allows); unless set, only when that is later than its end.
func (s *Server) lifeAtLeast(ctx context.Context, info *service.SessionInfo, d time.Duration, set bool) error {
	if most := time.Until(info.CreatedAt.Add(s.cfg.SessionMaxLifetime)); d > most {
		d = most.Truncate(time.Second)
	}
	if d <= 0 || (!set && !time.Now().Add(d).After(info.ExpiresAt)) {
		return nil
	}
	_, err := s.svc.SetSessionLifetime(ctx, info.ID, ownerOf(ctx), d)
	return err
}

// list answers Sandbox.list: the key's sandboxes, filtered by metadata,
// state, template and start (startedAfter), newest first unless asked,
// a page at a time (X-Next-Token).
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	want, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	states, err := stateFilter(q["state"])
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	desc := true // E2B's default order: newest first
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		desc = false
	default:
		writeAPIError(w, http.StatusBadRequest, "order must be asc or desc")
		return
	}
	var after time.Time // startedAfter: the sandboxes started at or after it
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			writeAPIError(w, http.StatusBadRequest, "startedAfter must be an RFC 3339 time, as "+time.RFC3339)
			return
		}
	}
	limit, offset, ok := pageOf(w, q.Get("limit"), q.Get("nextToken"))
	if !ok {
		return
	}
	out := []wire.SandboxDetail{}
	for _, info := range s.svc.ListSessions(r.Context(), ownerOf(r.Context())) {
		if info.Template == "" || (q.Get("template") != "" && q.Get("template") != info.Template) || !matches(info.Labels, want) ||
			!states[stateOf(info)] || info.CreatedAt.Before(after) {
			continue
		}
		d := s.detail(info)
		d.Lifecycle = nil // not part of ListedSandbox
		out = append(out, d)
	}
	// By start, then id: a stable order for the pages of one listing.
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if !a.StartedAt.Equal(b.StartedAt) {
			return a.StartedAt.After(b.StartedAt) == desc
		}
		return (a.SandboxID > b.SandboxID) == desc
	})
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

// stateFilter reads the list's state query (repeated, or comma-joined
// as the SDKs send it): the states to list, both when absent.
func stateFilter(raw []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, v := range raw {
		for st := range strings.SplitSeq(v, ",") {
			switch st = strings.TrimSpace(st); st {
			case "running", "paused":
				out[st] = true
			case "":
			default:
				return nil, fmt.Errorf("state %s is not running or paused", service.Quote(st))
			}
		}
	}
	if len(out) == 0 {
		out["running"], out["paused"] = true, true
	}
	return out, nil
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

// e2bOnTimeout is a session's on_timeout as E2B's lifecycle names it:
// both of codecage's pauses are E2B's "pause".
func e2bOnTimeout(onTimeout string) string {
	if onTimeout == "pause_files" {
		return "pause"
	}
	return cmp.Or(onTimeout, "kill")
}
