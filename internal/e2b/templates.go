package e2b

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

// E2B templates are environments (service.BuildEnvironment): the SDK's
// Template builder (e2b 2.51.0) builds one, Sandbox.create(name) starts
// from it. The calls, as the SDK makes them and this file answers them:
//
//	POST /v3/templates {name|alias, tags, cpuCount, memoryMB, minFreeDiskMb}
//	  -> 202 {templateID, buildID, public, aliases, names, tags}
//	  (POST /v2/templates {alias, ...} -> 202 the same, E2B's TemplateLegacy fields.)
//	  The name ("my-tpl" or "my-tpl:tag"; the tag is dropped) is the
//	  environment's name and the template's id. An operator's call only.
//	GET /templates/{templateID}/files/{hash} -> 201 {present, url}: url is
//	  this server's, signed for an hour; the SDK PUTs a tar.gz of a copy
//	  step's files there (template_files.go).
//	POST /v2/templates/{templateID}/builds/{buildID} (TemplateBuildStartV2:
//	  {fromImage|fromTemplate, fromImageRegistry, steps: [{type, args,
//	  filesHash, force}], startCmd, readyCmd, force}) -> 202, empty. The
//	  steps become a chain of environment builds (template_steps.go), run
//	  in the background (template_build.go).
//	GET /templates/{templateID}/builds/{buildID}/status?logsOffset=&limit=
//	  -> 200 {templateID, buildID, status: waiting|building|ready|error,
//	  logEntries: [{timestamp, level, message, step}] from logsOffset (at
//	  most limit, 100), logs: [], reason: {message, step, logEntries}}.
//	  The SDK throws BuildError(reason.message) on "error", pointing at
//	  the builder call of reason.step ("base", "finalize" or a step's
//	  index from 1). An unsupported step fails the build this way.
//	GET /templates/aliases/{alias} -> 200 {templateID, public} | 404.
//	GET /templates, GET /v2/templates -> 200 [Template].
//	DELETE /templates/{templateID} -> 204 (a template; else a snapshot).
//
// Errors are E2B's {code, message}; the SDK makes a 4xx or 5xx of the
// build calls a BuildError whose message starts with the status.

func (s *Server) templateRoutes() {
	m := s.control
	m.HandleFunc("POST /v3/templates", s.requestTemplate)
	m.HandleFunc("POST /v2/templates", s.requestTemplate)
	m.HandleFunc("GET /templates/{templateID}/files/{hash}", s.templateFiles)
	m.HandleFunc("POST /v2/templates/{templateID}/builds/{buildID}", s.triggerTemplate)
	m.HandleFunc("GET /templates/{templateID}/builds/{buildID}/status", s.templateStatus)
	m.HandleFunc("GET /templates", s.listTemplates)
	m.HandleFunc("GET /v2/templates", s.listTemplates)
}

// stageName matches the environments a template's chain builds before its
// last (name.bXXXXXXXX.N); no template takes such a name.
var stageName = regexp.MustCompile(`\.b[0-9a-f]{8}\.[0-9]{1,3}$`)

// stagePrefix names a build's intermediate environments.
func stagePrefix(name, buildID string) string {
	return name[:min(len(name), 50)] + ".b" + strings.ReplaceAll(buildID, "-", "")[:8]
}

// templateName is the environment a build request names, or an error
// for the caller.
func templateName(name string) (string, error) {
	if i := strings.LastIndexByte(name, ':'); i >= 0 && !strings.Contains(name[i:], "/") {
		name = name[:i] // E2B's tag: codecage keeps the last build only
	}
	switch {
	case name == "":
		return "tpl-" + strings.ReplaceAll(newUUID(), "-", "")[:12], nil
	case builtinTemplates[name] || builtinBase(name):
		return "", fmt.Errorf("%s is one of E2B's own templates, which codecage serves: name yours otherwise", service.Quote(name))
	case !envstore.NamePattern.MatchString(name) || stageName.MatchString(name):
		return "", fmt.Errorf("template name %s: a codecage template is an environment, whose name is 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", service.Quote(name))
	}
	return name, nil
}

// operator answers 403 unless the caller may build environments.
func (s *Server) operator(w http.ResponseWriter, r *http.Request) bool {
	err := s.svc.IsOperator(r.Context())
	if err == nil {
		return true
	}
	writeAPIError(w, http.StatusForbidden, "building and deleting templates is an operator's action: "+err.Error())
	return false
}

func (s *Server) requestTemplate(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name  string   `json:"name"`
		Alias string   `json:"alias"`
		Tags  []string `json:"tags"`
	}
	if err := decodeBody(r, &body); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.operator(w, r) {
		return
	}
	name, err := templateName(cmp.Or(body.Name, body.Alias))
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	b, err := s.builds.add(name, ownerOf(r.Context()))
	switch {
	case errors.Is(err, errBuildRunning):
		writeAPIError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		writeAPIError(w, http.StatusTooManyRequests, err.Error())
		return
	}
	tags := append([]string{}, body.Tags...)
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": name, "buildID": b.id, "public": false,
		"aliases": []string{name}, "names": []string{name}, "tags": tags})
}

func (s *Server) templateFiles(w http.ResponseWriter, r *http.Request) {
	if !s.operator(w, r) {
		return
	}
	template, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !filesHashRE.MatchString(hash) {
		writeAPIError(w, http.StatusBadRequest, "the files hash is 64 hexadecimal digits (the SDK's sha256)")
		return
	}
	if s.builds.latest(template) == nil {
		writeAPIError(w, http.StatusNotFound, "template "+service.Quote(template)+" has no build requested")
		return
	}
	if s.uploads.has(template, hash) {
		writeJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": s.uploadURL(r, template, hash)})
}

func (s *Server) triggerTemplate(w http.ResponseWriter, r *http.Request) {
	var spec templateSpec
	if err := decodeBody(r, &spec); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.operator(w, r) {
		return
	}
	b := s.builds.get(r.PathValue("templateID"), r.PathValue("buildID"), ownerOf(r.Context()))
	if b == nil {
		writeAPIError(w, http.StatusNotFound, "template build "+service.Quote(r.PathValue("buildID"))+" not found: POST /v3/templates requests one")
		return
	}
	b.mu.Lock()
	started := b.triggered
	b.triggered = true
	b.mu.Unlock()
	if started {
		writeAPIError(w, http.StatusConflict, "template build "+b.id+" has started already")
		return
	}
	// An unsupported step fails the build at once, with E2B's reason.
	stages, err := plan(spec, b.template, stagePrefix(b.template, b.id), func(n string) (envstore.Env, bool) { return s.envLookup(r.Context(), n) })
	if err != nil {
		var se *stepError
		if !errors.As(err, &se) {
			se = &stepError{Step: "base", Message: err.Error()}
		}
		s.uploads.drop(b.template)
		b.finish(se)
	} else {
		s.startBuild(r.Context(), b, stages)
	}
	w.WriteHeader(http.StatusAccepted)
}

// buildInfo is E2B's TemplateBuildInfo.
type buildInfo struct {
	TemplateID string       `json:"templateID"`
	BuildID    string       `json:"buildID"`
	Status     string       `json:"status"`
	LogEntries []logEntry   `json:"logEntries"`
	Logs       []string     `json:"logs"`
	Reason     *buildReason `json:"reason,omitempty"`
}

type buildReason struct {
	Message    string     `json:"message"`
	Step       string     `json:"step,omitempty"`
	LogEntries []logEntry `json:"logEntries"`
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
	b := s.builds.get(r.PathValue("templateID"), r.PathValue("buildID"), ownerOf(r.Context()))
	if b == nil {
		writeAPIError(w, http.StatusNotFound, "template build "+service.Quote(r.PathValue("buildID"))+" not found (this server keeps its last "+strconv.Itoa(maxBuildsKept)+" builds)")
		return
	}
	status, entries, reason := b.page(offset, limit)
	out := buildInfo{TemplateID: b.template, BuildID: b.id, Status: status, LogEntries: entries, Logs: []string{}}
	if reason != nil {
		out.Reason = &buildReason{Message: reason.Message, Step: reason.Step, LogEntries: []logEntry{}}
	}
	writeJSON(w, http.StatusOK, out)
}

// templateAlias answers Template.exists: E2B's TemplateAliasResponse for
// a built-in template or an environment, 404 (as E2B's) for any other.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := untagged(r.PathValue("alias"))
	switch {
	case builtinTemplates[alias]:
		writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
	case !stageName.MatchString(alias) && s.envExists(r.Context(), alias):
		writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": false})
	default:
		writeAPIError(w, http.StatusNotFound, "template alias "+service.Quote(alias)+" not found: codecage serves E2B's base and "+
			"code-interpreter and the environments its operator built")
	}
}

// templateInfo is E2B's Template.
type templateInfo struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int64      `json:"memoryMB"`
	DiskSizeMB    int64      `json:"diskSizeMB"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *struct{}  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
	BuildCount    int        `json:"buildCount"`
	EnvdVersion   string     `json:"envdVersion"`
	BuildStatus   string     `json:"buildStatus"`
}

// listTemplates lists the environments as templates (not the internal
// stages of their builds).
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	envs, err := s.svc.Environments(r.Context())
	if err != nil {
		envs = nil // a server without environments has no templates of its own
	}
	out := []templateInfo{}
	for _, e := range envs {
		if stageName.MatchString(e.Name) {
			continue
		}
		buildID := uuidOf(e.ID)
		if b := s.builds.latest(e.Name); b != nil {
			buildID = b.id
		}
		out = append(out, templateInfo{TemplateID: e.Name, BuildID: buildID, CPUCount: 1, MemoryMB: s.cfg.MemoryLimit >> 20,
			DiskSizeMB: s.cfg.WorkspaceMax >> 20, Aliases: []string{e.Name}, Names: []string{e.Name}, CreatedAt: e.Created.UTC(),
			UpdatedAt: e.Created.UTC(), BuildCount: 1, EnvdVersion: EnvdVersion, BuildStatus: statusReady})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate answers DELETE /templates/{id}: an environment built as
// a template (an operator's call), else the snapshot of that id.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	name := untagged(r.PathValue("id"))
	if stageName.MatchString(name) || builtinTemplates[name] || !s.envExists(r.Context(), name) {
		s.deleteSnapshot(w, r)
		return
	}
	if !s.operator(w, r) {
		return
	}
	if err := s.removeTemplateEnv(r.Context(), name, ""); err != nil {
		s.serviceError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// removeTemplateEnv removes an environment and the internal stages its
// template's builds left, but those of prefix (the build running now).
func (s *Server) removeTemplateEnv(ctx context.Context, name, keepPrefix string) error {
	if err := s.svc.RemoveEnvironment(ctx, name); err != nil && !errors.Is(err, envstore.ErrNotFound) {
		return err
	}
	envs, _ := s.svc.Environments(ctx)
	mine := name[:min(len(name), 50)] + ".b"
	for _, e := range envs {
		if strings.HasPrefix(e.Name, mine) && stageName.MatchString(e.Name) && len(e.Name) <= len(mine)+8+4 &&
			(keepPrefix == "" || !strings.HasPrefix(e.Name, keepPrefix+".")) {
			_ = s.svc.RemoveEnvironment(ctx, e.Name)
		}
	}
	return nil
}

// envLookup is the environment of that name, if there is one: its record,
// which the service gives operators only (a template build's caller, or
// the build's own goroutine, in-process).
func (s *Server) envLookup(ctx context.Context, name string) (envstore.Env, bool) {
	if !envstore.NamePattern.MatchString(name) {
		return envstore.Env{}, false
	}
	e, err := s.svc.Environment(ctx, name)
	return e, err == nil
}

// envExists reports whether an environment of that name exists: every
// key may ask (Template.exists, Sandbox.create).
func (s *Server) envExists(ctx context.Context, name string) bool {
	return s.svc.EnvironmentExists(ctx, name)
}

// templateEnv is the environment a create's template names ("": none).
func (s *Server) templateEnv(r *http.Request, template string) string {
	name := untagged(template)
	if builtinTemplates[name] || stageName.MatchString(name) || !s.envExists(r.Context(), name) {
		return ""
	}
	return name
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// uuidOf shapes an environment's digest ("sha256:<hex>") as a build id.
func uuidOf(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) < 32 {
		h += strings.Repeat("0", 32-len(h))
	}
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
