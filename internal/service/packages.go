package service

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/codecage/codecage/internal/config"
	"github.com/codecage/codecage/internal/egress"
	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/policy"
)

// EventInstall is the event kind of pip_install.
const EventInstall = "install"

// InstallRequest asks to install a package into a session.
type InstallRequest struct {
	Package   string
	Version   string // "" or "latest", a version, or a PEP 440 specifier
	SessionID string
	Owner     string
	// inRun: asked by the session's own run (a %pip line), which holds
	// the session's run lock already.
	inRun bool
}

// Why an install failed, in InstallResult.Error.
const (
	InstallBlocked   = "blocked"
	InstallNotFound  = "not_found"
	InstallNoWheel   = "no_wheel"
	InstallTooLarge  = "too_large"
	InstallConflict  = "conflict"
	InstallTimeout   = "timeout"
	InstallFailed    = "failed"
	wheelhouseInside = "/opt/codecage/wheelhouse"
)

// InstallResult is pip_install's result: the seed's fields, what was
// installed (dependencies included) and why not.
type InstallResult struct {
	Success          bool               `json:"success"`
	Message          string             `json:"message"`
	Package          string             `json:"package"`
	InstalledVersion *string            `json:"installed_version"`
	InstallationTime float64            `json:"installation_time"`
	Error            *string            `json:"error" doc:"Why it failed: blocked, not_found, no_wheel, too_large, conflict, timeout or failed."`
	Warnings         []string           `json:"warnings"`
	Installed        []InstalledPackage `json:"installed"`
	// Log is the end of pip's output, for a failure's details.
	Log         string `json:"log"`
	ExecutionID string `json:"execution_id"`
}

// InstalledPackage is one distribution in a session's package directory.
type InstalledPackage struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Modules []string `json:"modules"`
}

// PipInstall installs a package (wheels only) into a session's own package
// directory with pip running in a jail whose only way out is the egress
// proxy, allowed to reach the configured index (or no network at all with
// a local wheelhouse). The session's later runs can import it.
func (s *Service) PipInstall(ctx context.Context, req InstallRequest) (*InstallResult, error) {
	fwd := req
	start := time.Now()
	return do(ctx, s, OpInstall, call[*InstallResult]{
		session: req.SessionID, peer: PeerCall{Owner: req.Owner, Install: &fwd},
		forwardAction: "session:" + req.SessionID,
		code:          req.Package,
		run:           func(ctx context.Context) (*InstallResult, error) { return s.pipInstall(ctx, req, start) },
		success: func(res *InstallResult, took time.Duration) Event {
			ev := Event{Kind: EventInstall, ExecutionID: res.ExecutionID, Code: strings.TrimSpace(req.Package + " " + req.Version),
				Outcome: "success", Duration: took, Detail: res.Message, Action: "session:" + req.SessionID}
			if res.ExecutionID != "" {
				ev.Backend = config.IsolationNative // pip runs in the native jail
			}
			if res.Error != nil {
				ev.Outcome = *res.Error
				if *res.Error == InstallBlocked {
					ev.SecurityEvents = []string{"package_blocked:" + req.Package}
				}
			}
			for _, w := range res.Warnings {
				if strings.HasPrefix(w, "typosquat") {
					ev.SecurityEvents = append(ev.SecurityEvents, "package_typosquat:"+req.Package)
				}
			}
			return ev
		},
	})
}

func (s *Service) pipInstall(ctx context.Context, req InstallRequest, start time.Time) (*InstallResult, error) {
	r, err := policy.ParseRequirement(req.Package, req.Version)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if req.SessionID == "" {
		return nil, fmt.Errorf("%w: installing a package needs a session_id: packages go into that session's own package directory (create a session first); the operator installs packages for every sandbox with codecage packages install", ErrInvalidRequest)
	}
	se, err := s.session(req.SessionID, req.Owner)
	if err != nil {
		return nil, err
	}
	// One request at a time per session, as for its interpreter.
	if !req.inRun {
		se.Lock()
		defer se.Unlock()
	}
	_, site, uid, _ := se.Workspace()
	if site == "" {
		return nil, fmt.Errorf("%w: session %s has no package directory", ErrSessionEnded, se.ID())
	}
	target := pipTarget{id: se.ID(), site: site, uid: uid, allow: se.Allow}
	if env := se.Environment(); env.RootDir != "" {
		// An environment's own root: its Python's pip, in a sandbox from
		// that root, so that the wheels chosen match its Python. (Over
		// the host's root, a requirements layer, the host's pip is it.)
		target.interpreter, target.root, target.env = env.Python, env.RootDir, env.Name
	}
	res, err := s.installInto(ctx, target, r, start)
	if res != nil {
		if similar, ok := policy.Typosquat(r.Normalized); ok {
			res.Warnings = append(res.Warnings, fmt.Sprintf("typosquat: %q looks like the popular package %q; check that this is the package you mean", r.Name, similar))
		}
	}
	return res, err
}

// pipTarget is where pip installs: a session's package directory, or the
// operator's layer (one more "session" as far as pip is concerned).
type pipTarget struct {
	id   string // the session's, or layerID
	site string // the directory pip installs into
	uid  int    // the host uid pip runs as (0: one of its own)
	// allow lets the session import what was installed; nil for the layer.
	allow func(modules []string)
	// An environment's build (envbuild_requirements.go) sets these: the
	// Python and root pip runs on ("": the host's), its bounds (0: the
	// pip_install ones), and a copy of pip's output as it comes.
	interpreter, root string
	// env names the environment whose root it is, for errors.
	env        string
	timeout    time.Duration
	maxInstall int64
	log        io.Writer
}

// installInto runs pip for r into se's package directory (the session's
// run lock held, or the layer's directory) and reads what it installed.
func (s *Service) installInto(ctx context.Context, se pipTarget, r policy.Requirement, start time.Time) (*InstallResult, error) {
	res := &InstallResult{Package: r.Name, Warnings: []string{}, Installed: []InstalledPackage{}}
	fail := func(kind, msg string) (*InstallResult, error) {
		res.Error, res.Message = &kind, msg
		res.InstallationTime = time.Since(start).Seconds()
		return res, nil
	}
	if err := policy.CheckBlocked(r, s.cfg.BlockedPackages); err != nil {
		return fail(InstallBlocked, strings.TrimPrefix(err.Error(), policy.ErrBadPackage.Error()+": "))
	}
	if kind, msg := s.precheck(ctx, r); kind != "" {
		return fail(kind, msg)
	}
	before := installedPackages(se.site)
	log, exit, id, err := s.runPip(ctx, se, []string{r.String()})
	if err != nil {
		return nil, err
	}
	res.ExecutionID = id
	res.Log = tail(log, 4096)
	if exit.Limit == fleet.LimitTimeout || exit.Limit == fleet.LimitCPU {
		return fail(InstallTimeout, fmt.Sprintf("pip did not finish within %s (SANDBOX_PIP_TIMEOUT)", s.cfg.PipTimeout))
	}
	if exit.Limit == fleet.LimitCanceled {
		return fail(InstallFailed, "canceled")
	}
	if exit.ExitCode != 0 && se.root != "" && noPipModule.MatchString(log) {
		return nil, fmt.Errorf("%w: pip_install: the Python of environment %s (%s) has no pip module; packages for a session from it must be installed by its own Python's pip (the host's could pick wheels for another Python): the operator builds the environment with pip (Debian's python3-pip, or an image whose Python has pip), or with the packages in it",
			ErrInvalidRequest, Quote(se.env), se.interpreter)
	}
	if exit.ExitCode != 0 || exit.Limit != fleet.LimitNone {
		kind, msg := pipFailure(log, r, s.cfg)
		return fail(kind, msg)
	}
	// An upgrade in a target directory leaves the old version's metadata
	// beside the new: keep what pip says it installed.
	pruneStaleMetadata(se.site, pipInstalled(log))
	after := installedPackages(se.site)
	var added []InstalledPackage
	for name, p := range after {
		if old, ok := before[name]; !ok || old.Version != p.Version {
			added = append(added, p)
		}
	}
	sort.Slice(added, func(i, j int) bool { return added[i].Name < added[j].Name })
	// A dependency may be blocked too: nothing blocked stays installed.
	for _, p := range added {
		dep := policy.Requirement{Name: p.Name, Normalized: policy.NormalizePackageName(p.Name)}
		if err := policy.CheckBlocked(dep, s.cfg.BlockedPackages); err != nil {
			removeDistribution(se.site, p.Name)
			return fail(InstallBlocked, fmt.Sprintf("%s needs %s, which is blocked by the operator's package policy (SANDBOX_BLOCKED_PACKAGES); it was removed", r.Name, p.Name))
		}
	}
	res.Installed = added
	if res.Installed == nil {
		res.Installed = []InstalledPackage{}
	}
	if p, ok := after[r.Normalized]; ok {
		v := p.Version
		res.InstalledVersion = &v
	}
	// The session's import policy now allows what was installed.
	if se.allow != nil {
		for _, p := range added {
			se.allow(p.Modules)
		}
	}
	res.Success = true
	version := "?"
	if res.InstalledVersion != nil {
		version = *res.InstalledVersion
	}
	where := "session " + se.id
	if se.id == layerID {
		where = "the operator's package layer (every sandbox started from now on)"
	}
	res.Message = fmt.Sprintf("installed %s %s into %s", r.Name, version, where)
	if len(added) > 1 {
		res.Message += fmt.Sprintf(" (with %d dependencies)", len(added)-1)
	}
	res.InstallationTime = time.Since(start).Seconds()
	return res, nil
}

// runPip runs pip in a jail on the session's package directory, for
// requirements already checked (policy.Requirement's String).
func (s *Service) runPip(ctx context.Context, se pipTarget, reqs []string) (string, fleet.Exit, string, error) {
	var out bytes.Buffer
	w := &lockedBuffer{b: &out}
	argv := []string{"-I", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
		"--no-cache-dir", "--only-binary=:all:", "--upgrade", "--progress-bar", "off", "--target", fleet.WorkspaceDir}
	interpreter, timeout, install := s.cfg.Interpreter, s.cfg.PipTimeout, s.cfg.PipMaxInstall
	if se.interpreter != "" {
		interpreter = se.interpreter
	}
	if se.timeout > 0 {
		timeout = se.timeout
	}
	if se.maxInstall > 0 {
		install = se.maxInstall
	}
	var sink io.Writer = w
	if se.log != nil {
		sink = io.MultiWriter(w, se.log)
	}
	work := fleet.Work{Kind: fleet.Pip, ID: fleet.NewID(), Interpreter: interpreter, Workspace: se.site, HostUID: se.uid,
		Limits: s.caps().Pip(timeout, s.cfg.PipMaxDownload, install),
		Stdout: sink, Stderr: sink}
	if s.cfg.PipFindLinks != "" {
		argv = append(argv, "--no-index", "--find-links", wheelhouseInside)
		work.Binds = []fleet.Bind{{Host: s.cfg.PipFindLinks, Path: wheelhouseInside}}
	} else {
		pol, err := indexPolicy(s.cfg.PipIndexURL)
		if err != nil {
			return "", fleet.Exit{}, "", fmt.Errorf("%w: SANDBOX_PIP_INDEX_URL: %v", ErrUnavailable, err)
		}
		l := newConnListener()
		proxy := egress.New(pol, egress.Options{Label: work.ID, Logger: s.log()})
		go proxy.Serve(l)
		defer proxy.Close()
		work.Forward = &fleet.Forward{Port: proxyPort, Handle: l.deliver}
		argv = append(argv, "--index-url", s.cfg.PipIndexURL)
	}
	work.Argv = append(append(argv, "--"), reqs...)
	spec := work.Spec()
	spec.Root = se.root
	lease, err := s.fleet.Start(ctx, fleet.Native, spec)
	if err != nil {
		return "", fleet.Exit{}, "", s.fleetError(ctx, err)
	}
	exit := lease.WaitProgram()
	return w.String(), exit, spec.ID, nil
}

// indexPolicy lets pip reach the index's host (and PyPI's file host when
// the index is PyPI) and nothing else.
func indexPolicy(index string) (egress.Policy, error) {
	u, err := url.Parse(index)
	if err != nil || u.Host == "" {
		return egress.Policy{}, fmt.Errorf("%q is not a URL", index)
	}
	allow := []string{u.Host}
	if u.Hostname() == "pypi.org" {
		allow = append(allow, "files.pythonhosted.org")
	}
	return egress.ParsePolicy(strings.Join(allow, ","))
}

// precheck answers what pip would answer less clearly, before a sandbox
// starts: the project does not exist, has no wheel, or its wheels are over
// the download limit. It says nothing ("") when it cannot tell.
func (s *Service) precheck(ctx context.Context, r policy.Requirement) (kind, msg string) {
	var files []string
	var sizes map[string]int64
	if s.cfg.PipFindLinks != "" {
		ents, err := os.ReadDir(s.cfg.PipFindLinks)
		if err != nil {
			return "", ""
		}
		sizes = map[string]int64{}
		for _, e := range ents {
			files = append(files, e.Name())
			if fi, err := e.Info(); err == nil {
				sizes[e.Name()] = fi.Size()
			}
		}
	} else {
		var ok bool
		if files, ok = indexFiles(ctx, s.cfg.PipIndexURL, r.Normalized); !ok {
			return "", ""
		}
		if files == nil {
			return InstallNotFound, fmt.Sprintf("no package %q on the index %s", r.Name, s.cfg.PipIndexURL)
		}
	}
	var wheels, sdists []string
	for _, f := range files {
		if name, _, ok := policy.ParseWheelFilename(f); ok && name == r.Normalized {
			wheels = append(wheels, f)
		} else if policy.IsSdistFilename(f) && sdistProject(f) == r.Normalized {
			sdists = append(sdists, f)
		}
	}
	where := s.cfg.PipIndexURL
	if s.cfg.PipFindLinks != "" {
		where = "the wheelhouse (SANDBOX_PIP_FIND_LINKS)"
	}
	switch {
	case len(wheels) == 0 && len(sdists) > 0:
		return InstallNoWheel, fmt.Sprintf("%s is published only as source (%s); only wheels are installed, since building from source runs the package's own code at install time", r.Name, sdists[0])
	case len(wheels) == 0:
		return InstallNotFound, fmt.Sprintf("no package %q in %s", r.Name, where)
	}
	if sizes != nil {
		small := 0
		for _, f := range wheels {
			if sizes[f] <= s.cfg.PipMaxDownload {
				small++
			}
		}
		if small == 0 {
			return InstallTooLarge, fmt.Sprintf("every wheel of %s is over the download limit of %d bytes (SANDBOX_PIP_MAX_DOWNLOAD)", r.Name, s.cfg.PipMaxDownload)
		}
	}
	return "", ""
}

var sdistName = regexp.MustCompile(`^(.+)-[0-9][^-]*\.(tar\.gz|zip|tar\.bz2)$`)

func sdistProject(fn string) string {
	if m := sdistName.FindStringSubmatch(strings.ToLower(fn)); m != nil {
		return policy.NormalizePackageName(m[1])
	}
	return ""
}

var hrefFile = regexp.MustCompile(`(?i)<a\s[^>]*href="([^"#]+)[^"]*"[^>]*>`)

// indexFiles lists the file names of a project's simple-index page: nil
// when the index says there is no such project, ok false when it could not
// be asked.
func indexFiles(ctx context.Context, index, project string) ([]string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimSuffix(index, "/")+"/"+project+"/", nil)
	if err != nil {
		return nil, false
	}
	req.Header.Set("Accept", "text/html")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, true
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	files := []string{}
	for _, m := range hrefFile.FindAllSubmatch(body, -1) {
		u, err := url.Parse(string(m[1]))
		if err == nil {
			files = append(files, filepath.Base(u.Path))
		}
	}
	return files, true
}

// pipFailure names a failed install from pip's output.
func pipFailure(log string, r policy.Requirement, cfg config.Config) (string, string) {
	switch {
	case strings.Contains(log, "No space left on device") || strings.Contains(log, "Errno 28") || strings.Contains(log, "File too large"):
		return InstallTooLarge, fmt.Sprintf("%s is too large: downloads are limited to %d bytes (SANDBOX_PIP_MAX_DOWNLOAD) and a session's packages to %d (SANDBOX_PIP_MAX_INSTALL)", r.Name, cfg.PipMaxDownload, cfg.PipMaxInstall)
	case strings.Contains(log, "ResolutionImpossible") || strings.Contains(log, "conflicting dependencies"):
		return InstallConflict, fmt.Sprintf("the requirements of %s conflict; see the log", r.String())
	case strings.Contains(log, "No matching distribution found"):
		if r.Specifier != "" {
			return InstallNotFound, fmt.Sprintf("no wheel of %s matches %s (or one of its dependencies has none)", r.Name, r.Specifier)
		}
		return InstallNotFound, fmt.Sprintf("no wheel found for %s or one of its dependencies", r.Name)
	}
	return InstallFailed, "pip failed; see the log"
}

// noPipModule is Python's answer to -m pip without pip.
var noPipModule = regexp.MustCompile(`(?m)No module named pip\s*$`)

var successLine = regexp.MustCompile(`(?m)^Successfully installed (.+)$`)

// pipInstalled reads pip's "Successfully installed a-1.0 b-2.0" line:
// normalized name to version.
func pipInstalled(log string) map[string]string {
	out := map[string]string{}
	m := successLine.FindStringSubmatch(log)
	if m == nil {
		return out
	}
	for _, nv := range strings.Fields(m[1]) {
		if i := strings.LastIndexByte(nv, '-'); i > 0 {
			out[policy.NormalizePackageName(nv[:i])] = nv[i+1:]
		}
	}
	return out
}

// pruneStaleMetadata removes the .dist-info directories of the projects
// pip just installed whose version is not the one installed.
func pruneStaleMetadata(dir string, installed map[string]string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		meta := readHeaders(filepath.Join(dir, e.Name(), "METADATA"))
		want, ok := installed[policy.NormalizePackageName(meta["Name"])]
		if ok && meta["Version"] != want {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// installedPackages reads the distributions in a package directory.
func installedPackages(dir string) map[string]InstalledPackage {
	out := map[string]InstalledPackage{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		info := filepath.Join(dir, e.Name())
		meta := readHeaders(filepath.Join(info, "METADATA"))
		if meta["Name"] == "" {
			continue
		}
		p := InstalledPackage{Name: meta["Name"], Version: meta["Version"], Modules: topLevel(info)}
		out[policy.NormalizePackageName(p.Name)] = p
	}
	return out
}

func readHeaders(path string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break // the body starts
		}
		if k, v, ok := strings.Cut(line, ": "); ok {
			if _, seen := out[k]; !seen {
				out[k] = v
			}
		}
	}
	return out
}

// topLevel lists a distribution's importable top-level names: its
// top_level.txt, else the first parts of the paths its RECORD lists.
func topLevel(info string) []string {
	var mods []string
	add := func(m string) {
		m = strings.TrimSuffix(m, ".py")
		if i := strings.IndexByte(m, '.'); i >= 0 && strings.Contains(m[i:], "cpython") {
			m = m[:i] // an extension module's file name
		}
		if m != "" && m != "__pycache__" && !strings.HasSuffix(m, ".dist-info") && !strings.HasSuffix(m, ".data") && m != ".." && m != "bin" && !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	if b, err := os.ReadFile(filepath.Join(info, "top_level.txt")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			add(strings.TrimSpace(l))
		}
		if len(mods) > 0 {
			return mods
		}
	}
	if b, err := os.ReadFile(filepath.Join(info, "RECORD")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			path, _, _ := strings.Cut(l, ",")
			first, _, _ := strings.Cut(path, "/")
			add(first)
		}
	}
	sort.Strings(mods)
	return mods
}

// removeDistribution deletes what a distribution's RECORD lists, and its
// metadata.
func removeDistribution(dir, name string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return
	}
	defer root.Close()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		info := e.Name()
		if policy.NormalizePackageName(readHeaders(filepath.Join(dir, info, "METADATA"))["Name"]) != policy.NormalizePackageName(name) {
			continue
		}
		for _, m := range topLevel(filepath.Join(dir, info)) {
			_ = root.RemoveAll(m)
			_ = root.Remove(m + ".py")
		}
		_ = root.RemoveAll(info)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// lockedBuffer collects output written from two pipes at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
