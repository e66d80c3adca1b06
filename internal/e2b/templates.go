package e2b

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/codecage/codecage/internal/e2b/templateplan"
	"github.com/codecage/codecage/internal/e2b/wire"
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
//	  in the background (service.StartEnvironmentBuild).
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

// templateName is the environment a build request names, or an error
// for the caller.
func templateName(name string) (string, error) {
	if i := strings.LastIndexByte(name, ':'); i >= 0 && !strings.Contains(name[i:], "/") {
		name = name[:i] // E2B's tag: codecage keeps the last build only
	}
	switch {
	case name == "":
		return "tpl-" + strings.ToLower(rand.Text()[:12]), nil // unnamed: a random name
	case templateplan.Builtin(name) || templateplan.BuiltinBase(name):
		return "", fmt.Errorf("%s is one of E2B's own templates, which codecage serves: name yours otherwise", service.Quote(name))
	case !envstore.NamePattern.MatchString(name) || service.IsBuildStage(name):
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
	id, err := s.svc.RequestEnvironmentBuild(r.Context(), name, ownerOf(r.Context()))
	switch {
	case errors.Is(err, service.ErrBuildRunning):
		writeAPIError(w, http.StatusConflict, err.Error())
		return
	case errors.Is(err, service.ErrTooManyBuilds):
		writeAPIError(w, http.StatusTooManyRequests, err.Error())
		return
	case err != nil:
		s.serviceError(w, err)
		return
	}
	tags := append([]string{}, body.Tags...)
	writeJSON(w, http.StatusAccepted, map[string]any{"templateID": name, "buildID": id, "public": false,
		"aliases": []string{name}, "names": []string{name}, "tags": tags})
}

func (s *Server) templateFiles(w http.ResponseWriter, r *http.Request) {
	if !s.operator(w, r) {
		return
	}
	template, hash := r.PathValue("templateID"), r.PathValue("hash")
	if !templateplan.ValidFilesHash(hash) {
		writeAPIError(w, http.StatusBadRequest, "the files hash is 64 hexadecimal digits (the SDK's sha256)")
		return
	}
	if s.svc.LatestEnvironmentBuild(r.Context(), template) == "" {
		writeAPIError(w, http.StatusNotFound, "template "+service.Quote(template)+" has no build requested")
		return
	}
	if s.svc.HasBuildUpload(r.Context(), template, hash) {
		writeJSON(w, http.StatusCreated, map[string]any{"present": true})
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"present": false, "url": s.uploadURL(r, template, hash)})
}

func (s *Server) triggerTemplate(w http.ResponseWriter, r *http.Request) {
	var spec templateplan.Spec
	if err := decodeBody(r, &spec); err != nil {
		writeAPIError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.operator(w, r) {
		return
	}
	template, id := r.PathValue("templateID"), r.PathValue("buildID")
	// An unsupported step fails the build at once, with E2B's reason.
	planned := func(prefix string) ([]service.BuildStage, *service.BuildFailure) {
		// addMcpServer: servers the operator allows as gateway servers,
		// which run outside the sandbox (nothing is installed in it).
		if names := templateplan.GatewayServers(spec); len(names) > 0 {
			asked := map[string]map[string]any{}
			for _, n := range names {
				asked[n] = map[string]any{}
			}
			if err := s.svc.CheckGateway(asked); err != nil {
				return nil, &service.BuildFailure{Step: "addMcpServer", Message: err.Error()}
			}
		}
		stages, err := templateplan.Plan(spec, template, prefix, func(n string) (envstore.Env, bool) { return s.envLookup(r.Context(), n) })
		if err != nil {
			var se *service.BuildFailure
			if !errors.As(err, &se) {
				se = &service.BuildFailure{Step: "base", Message: err.Error()}
			}
			return nil, se
		}
		return stages, nil
	}
	err := s.svc.StartEnvironmentBuild(r.Context(), template, id, ownerOf(r.Context()), planned)
	switch {
	case errors.Is(err, service.ErrNotFound):
		writeAPIError(w, http.StatusNotFound, "template build "+service.Quote(id)+" not found: POST /v3/templates requests one")
	case errors.Is(err, service.ErrBuildStarted):
		writeAPIError(w, http.StatusConflict, "template build "+id+" has started already")
	case err != nil:
		s.serviceError(w, err)
	default:
		w.WriteHeader(http.StatusAccepted)
	}
}

// templateAlias answers Template.exists: E2B's TemplateAliasResponse for
// a built-in template or an environment, 404 (as E2B's) for any other.
func (s *Server) templateAlias(w http.ResponseWriter, r *http.Request) {
	alias := templateplan.Untagged(r.PathValue("alias"))
	switch {
	case templateplan.Builtin(alias):
		writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": true})
	case !service.IsBuildStage(alias) && s.envExists(r.Context(), alias):
		writeJSON(w, http.StatusOK, map[string]any{"templateID": alias, "public": false})
	default:
		writeAPIError(w, http.StatusNotFound, "template alias "+service.Quote(alias)+" not found: codecage serves E2B's base and "+
			"code-interpreter and the environments its operator built")
	}
}

// listTemplates lists the environments as templates (not the internal
// stages of their builds).
func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request) {
	envs, err := s.svc.Environments(r.Context())
	if err != nil {
		envs = nil // a server without environments has no templates of its own
	}
	out := []wire.TemplateInfo{}
	for _, e := range envs {
		if service.IsBuildStage(e.Name) {
			continue
		}
		buildID := uuidOf(e.ID)
		if id := s.svc.LatestEnvironmentBuild(r.Context(), e.Name); id != "" {
			buildID = id
		}
		out = append(out, wire.TemplateInfo{TemplateID: e.Name, BuildID: buildID, CPUCount: 1, MemoryMB: s.cfg.MemoryLimit >> 20,
			DiskSizeMB: s.cfg.WorkspaceMax >> 20, Aliases: []string{e.Name}, Names: []string{e.Name}, CreatedAt: e.Created.UTC(),
			UpdatedAt: e.Created.UTC(), BuildCount: 1, EnvdVersion: EnvdVersion, BuildStatus: statusReady})
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate answers DELETE /templates/{id}: an environment built as
// a template (an operator's call), else the snapshot of that id.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	name := templateplan.Untagged(r.PathValue("id"))
	if service.IsBuildStage(name) || templateplan.Builtin(name) || !s.envExists(r.Context(), name) {
		s.deleteSnapshot(w, r)
		return
	}
	if !s.operator(w, r) {
		return
	}
	if err := s.svc.RemoveBuiltEnvironment(r.Context(), name); err != nil {
		s.serviceError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// envLookup is the environment of that name, if there is one: its record,
// which the service gives operators only (a template build's caller).
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
	name := templateplan.Untagged(template)
	if templateplan.Builtin(name) || service.IsBuildStage(name) || !s.envExists(r.Context(), name) {
		return ""
	}
	return name
}

// uuidOf shapes an environment's digest ("sha256:<hex>") as a build id.
func uuidOf(id string) string {
	h := strings.TrimPrefix(id, "sha256:")
	if len(h) < 32 {
		h += strings.Repeat("0", 32-len(h))
	}
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
