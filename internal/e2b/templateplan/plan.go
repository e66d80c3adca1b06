// Package templateplan translates an E2B template (its TemplateBuildStartV2
// steps) into codecage environment builds. It is the E2B adapter's, kept
// apart because it is pure: no HTTP and no service calls, only a spec in
// and the stages out, so it is tested and fuzzed on its own.
package templateplan

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

// A template's steps (E2B's TemplateBuildStartV2, as the SDK's builder
// serializes them) become a chain of environment builds: each run of
// steps of one kind is one EnvironmentBuild over the previous one's
// environment, the last carries the template's name and metadata. The
// SDK sends aptInstall, pipInstall and npmInstall as RUN steps of fixed
// shapes; they are recognised here by those shapes.

// Caps on what a template may ask for.
const (
	maxTemplateSteps = 256
	maxStepArg       = 64 << 10
	maxStartCmd      = 16 << 10
)

// Spec is E2B's TemplateBuildStartV2.
type Spec struct {
	FromImage         string          `json:"fromImage"`
	FromTemplate      string          `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	StartCmd          string          `json:"startCmd"`
	ReadyCmd          string          `json:"readyCmd"`
	Steps             []Step          `json:"steps"`
	Force             bool            `json:"force"`
}

// Step is E2B's TemplateStep (the SDK adds forceUpload,
// resolveSymlinks and gzip, which the upload already applied).
type Step struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// stepError is a template refused or failed at one step: E2B's
// BuildStatusReason, whose step the SDK maps to the builder call that
// made it ("base", "finalize", or the step's index counted from 1).
type stepError = service.BuildFailure

// stage is one environment build of a template's chain.
type stage = service.BuildStage

// Lookup answers what the planner needs of the server: the
// environment of that name, if there is one.
type Lookup func(name string) (envstore.Env, bool)

// plan turns a template into its chain of builds; name is the
// environment the last one records, internal names the others (prefix
// plus their index). Unsupported steps are a *stepError.
func Plan(spec Spec, name, prefix string, exists Lookup) ([]stage, error) {
	p := planner{name: name, prefix: prefix, vars: map[string]string{}, noCache: spec.Force}
	for _, st := range spec.Steps {
		if len(st.Args) > 0 && strings.HasPrefix(st.Args[0], "pip install") && strings.EqualFold(st.Type, "RUN") {
			p.needPip = true // the layer's pip runs on the root's python3
		}
	}
	if err := p.base(spec, exists); err != nil {
		return nil, err
	}
	if len(spec.Steps) > maxTemplateSteps {
		return nil, &stepError{Step: strconv.Itoa(maxTemplateSteps + 1), Message: fmt.Sprintf("a template has at most %d steps, not %d", maxTemplateSteps, len(spec.Steps))}
	}
	for i, st := range spec.Steps {
		if err := p.step(strconv.Itoa(i+1), st); err != nil {
			return nil, err
		}
	}
	for _, c := range []struct{ what, cmd string }{{"start command", spec.StartCmd}, {"ready command", spec.ReadyCmd}} {
		if len(c.cmd) > maxStartCmd || strings.ContainsRune(c.cmd, 0) {
			return nil, &stepError{Step: "finalize", Message: fmt.Sprintf("the %s is longer than %d bytes or holds a NUL", c.what, maxStartCmd)}
		}
	}
	p.finish()
	last := &p.stages[len(p.stages)-1]
	last.Build.Name = name
	last.Build.StartCmd, last.Build.ReadyCmd, last.Build.Workdir = cmp.Or(spec.StartCmd, p.startCmd), cmp.Or(spec.ReadyCmd, p.readyCmd), p.workdir
	if len(p.vars) > 0 {
		last.Build.Vars = p.vars
	}
	return p.stages, nil
}

// Kinds of the base a template starts from, before it is built.
const (
	baseHost   = iota // the host's root: E2B's base templates, a Debian base
	baseEnv           // an environment of that name
	baseImage         // an image reference the build pulls
	baseDebian        // a Debian root of another release (Suite)
)

type planner struct {
	name, prefix string
	stages       []stage
	// The base while no stage is built yet.
	kind         int
	ref          string   // the environment or the image
	suite        string   // of baseDebian
	apt          []string // Debian packages asked for so far
	debianFamily bool
	// e2bExtra: the base is E2B's own (the host's root stands for it), so
	// a Debian root built in its place has these too, as E2B's has and the
	// host's root gives: pip and Node.js (Mastra's code mode runs node),
	// and for the code interpreter its data-science packages.
	e2bExtra []string
	// open is "docker" while steps go to the last stage's Dockerfile;
	// dockerfile is that Dockerfile so far.
	open       string
	dockerfile strings.Builder
	// reqs are the pip requirements, in order: one packages layer over
	// the template's root, built last (layers do not stack); reqStep is
	// the step that asked first, for a failure's reason.
	reqs    []string
	reqStep string
	// noCache (E2B's skipCache) builds the Debian root afresh; needPip
	// puts pip in it, for the packages layer's install.
	noCache, needPip bool
	// Metadata, in force from where it is set (a base environment's first).
	vars               map[string]string
	varOrder           []string
	workdir            string
	startCmd, readyCmd string
	// user is the account build steps run as from here on (setUser; ""
	// is root), in the Dockerfile stages' USER lines.
	user string
}

// ValidFilesHash reports whether h is a copy step's files hash, the name
// its upload is kept under: 64 lowercase hex digits.
func ValidFilesHash(h string) bool { return filesHashRE.MatchString(h) }
func (p *planner) setVar(k, v string) {
	if _, ok := p.vars[k]; !ok {
		p.varOrder = append(p.varOrder, k)
	}
	p.vars[k] = v
}

var (
	aptPrefix   = "apt-get update && DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y "
	debName     = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,99}$`)
	envKey      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	filesHashRE = regexp.MustCompile(`^[a-f0-9]{64}$`)
	codename    = regexp.MustCompile(`^[a-z]{2,20}$`)
	fileMode    = regexp.MustCompile(`^0?[0-7]{3,4}$`)
)

// singleQuote is s in single quotes as E2B's messages put a command or a
// user, capped; one that needs escaping is Go-quoted instead.
func singleQuote(s string) string {
	s = bounded.String(s, 200)
	if q := strconv.Quote(s); q[1:len(q)-1] != s || strings.Contains(s, "'") {
		return q
	}
	return "'" + s + "'"
}

func unsupported(step, format string, args ...any) error {
	return &stepError{Step: step, Message: "step " + step + ": " + fmt.Sprintf(format, args...)}
}

// step plans one of the template's steps, by its type.
func (p *planner) step(at string, st Step) error {
	for _, a := range st.Args {
		if len(a) > maxStepArg {
			return unsupported(at, "an argument is longer than %d bytes", maxStepArg)
		}
	}
	switch strings.ToUpper(st.Type) {
	case "RUN":
		return p.runStep(at, stepArg(st, 0), stepArg(st, 1))
	case "COPY":
		return p.copyStep(at, st)
	case "ENV":
		return p.envStep(at, st.Args)
	case "WORKDIR":
		return p.workdirStep(at, stepArg(st, 0))
	case "USER":
		return p.userStep(at, stepArg(st, 0))
	}
	return unsupported(at, "step type %s is not supported", service.Quote(st.Type))
}

// stepArg is the step's i-th argument, "" past the last.
func stepArg(st Step, i int) string {
	if i < len(st.Args) {
		return st.Args[i]
	}
	return ""
}

// runStep plans runCmd (and aptInstall and pipInstall, which the SDK
// sends as commands), run as user or the template's current one.
func (p *planner) runStep(at, cmd, user string) error {
	if mcpPull.MatchString(cmd) {
		// Template.addMcpServer: the servers run outside the sandbox,
		// in the server (the adapter checked the operator allows them);
		// nothing of them goes into the template's root.
		return nil
	}
	as := p.user
	if user != "" {
		as = buildUser(user)
	}
	if as != "" {
		if !userName.MatchString(as) {
			return unsupported(at, "failed to run command %s: command failed: unauthenticated: invalid username: %s", singleQuote(cmd), singleQuote(user))
		}
		if strings.TrimSpace(cmd) == "" {
			return unsupported(at, "runCmd with no command")
		}
		return p.run(at, as, cmd)
	}
	switch {
	case strings.HasPrefix(cmd, aptPrefix):
		return p.aptInstall(at, strings.TrimPrefix(cmd, aptPrefix))
	case cmd == "pip install" || strings.HasPrefix(cmd, "pip install "):
		return p.pipInstall(at, strings.TrimPrefix(cmd, "pip install"))
	case strings.HasPrefix(cmd, "npm install") || strings.HasPrefix(cmd, "bun install"):
		return unsupported(at, "npmInstall and bunInstall are not supported: a codecage build reaches no npm registry")
	case strings.TrimSpace(cmd) == "":
		return unsupported(at, "runCmd with no command")
	}
	return p.run(at, "", cmd)
}

// copyStep plans copy: a source inside the upload its files hash names.
func (p *planner) copyStep(at string, st Step) error {
	src, dest, mode := stepArg(st, 0), stepArg(st, 1), stepArg(st, 3)
	if !filesHashRE.MatchString(st.FilesHash) {
		return unsupported(at, "copy without the files hash of its upload")
	}
	if src == "" || dest == "" || strings.HasPrefix(src, "/") || strings.Contains("/"+src+"/", "/../") {
		return unsupported(at, "copy from %s: the source is a path inside the template's file context", service.Quote(src))
	}
	line := "COPY "
	if mode != "" {
		if !fileMode.MatchString(mode) {
			return unsupported(at, "copy with mode %s", service.Quote(mode))
		}
		line += "--chmod=" + mode + " "
	}
	if err := p.docker(at, line+jsonArray(st.FilesHash+"/"+src, dest)); err != nil {
		return err
	}
	last := &p.stages[len(p.stages)-1]
	last.Copies = append(last.Copies, st.FilesHash)
	return nil
}

// envStep plans setEnvs: name and value pairs.
func (p *planner) envStep(at string, args []string) error {
	if len(args)%2 != 0 {
		return unsupported(at, "setEnvs with an odd number of arguments")
	}
	for i := 0; i < len(args); i += 2 {
		k, v := args[i], args[i+1]
		if !envKey.MatchString(k) || strings.ContainsAny(v, "\x00\r\n") {
			return unsupported(at, "setEnvs: %s is not a variable name, or its value holds a line break or NUL", service.Quote(k))
		}
		p.setVar(k, v)
		if p.open == "docker" {
			p.emit(envLine(k, v))
		}
	}
	return nil
}

// workdirStep plans setWorkdir: relative to the current one unless
// absolute.
func (p *planner) workdirStep(at, w string) error {
	if w == "" || strings.ContainsAny(w, "\x00\r\n") {
		return unsupported(at, "setWorkdir needs a path without line breaks")
	}
	if !strings.HasPrefix(w, "/") {
		w = strings.TrimSuffix(p.workdir, "/") + "/" + w
	}
	p.workdir = w
	if p.open == "docker" {
		p.emit("WORKDIR " + jsonString(w) + "\n")
	}
	return nil
}

// userStep plans setUser.
func (p *planner) userStep(at, name string) error {
	u := buildUser(name)
	if u != "" && !userName.MatchString(u) {
		return unsupported(at, "setUser failed: unauthenticated: invalid username: %s", singleQuote(name))
	}
	if u != p.user {
		p.user = u
		if p.open == "docker" {
			p.emit(userLines(u, "setUser failed"))
		} // else the next Dockerfile stage starts as u
	}
	return nil
}

func (p *planner) aptInstall(at, rest string) error {
	if len(p.stages) > 0 || !(p.debianFamily || p.kind == baseHost) {
		return unsupported(at, "aptInstall is supported only right after a Debian, Python or Ubuntu base (fromDebianImage, fromPythonImage, fromUbuntuImage, fromBaseImage), before any other building step: codecage builds such a root from Debian packages")
	}
	rest = strings.TrimPrefix(rest, "--no-install-recommends ")
	rest = strings.TrimPrefix(rest, "--fix-missing ")
	pkgs := strings.Fields(rest)
	if len(pkgs) == 0 {
		return unsupported(at, "aptInstall with no packages")
	}
	for _, pk := range pkgs {
		if !debName.MatchString(pk) {
			return unsupported(at, "aptInstall: %s is not a Debian package name (versions and options are not supported)", service.Quote(pk))
		}
	}
	if p.kind == baseHost {
		p.kind = baseDebian // the host's release, built with these packages
	}
	p.apt = append(p.apt, pkgs...)
	return nil
}

func (p *planner) pipInstall(at, rest string) error {
	var reqs []string
	for _, f := range strings.Fields(rest) {
		if f == "--user" {
			continue // one layer for every user
		}
		if strings.HasPrefix(f, "-") || strings.HasPrefix(f, ".") || strings.HasPrefix(f, "/") {
			return unsupported(at, "pipInstall(%s): only requirement names are supported (no options, paths or the copied project)", service.Quote(f))
		}
		reqs = append(reqs, f)
	}
	if len(reqs) == 0 {
		return unsupported(at, "pipInstall with no packages (installing the copied project) is not supported")
	}
	if p.reqStep == "" {
		p.reqStep = at
	}
	for _, r := range reqs {
		if !slices.Contains(p.reqs, r) {
			p.reqs = append(p.reqs, r)
		}
	}
	return nil
}

// docker adds a line to the open Dockerfile stage, opening one FROM the
// chain so far (with the variables and working directory set so far).
func (p *planner) docker(at, line string) error {
	if p.open != "docker" {
		from := p.ref
		if len(p.stages) > 0 || p.kind != baseImage {
			from = p.rootImage()
		}
		p.open = "docker"
		p.dockerfile.Reset()
		p.dockerfile.WriteString("FROM " + from + "\n")
		for _, k := range p.varOrder {
			p.dockerfile.WriteString(envLine(k, p.vars[k]))
		}
		if p.workdir != "" {
			p.dockerfile.WriteString("WORKDIR " + jsonString(p.workdir) + "\n")
		}
		if p.user != "" {
			p.dockerfile.WriteString(userLines(p.user, "setUser failed"))
		}
		p.add(stage{Step: at, What: "Dockerfile"})
	}
	p.emit(line + "\n")
	return nil
}

// emit adds a line to the open Dockerfile stage.
func (p *planner) emit(line string) {
	p.dockerfile.WriteString(line)
	p.stages[len(p.stages)-1].Build.Dockerfile = p.dockerfile.String()
}

// close ends the open stage, or builds the base when none is built yet,
// and returns the environment the next stage goes over ("": the host's
// root).
func (p *planner) close() string {
	p.open = ""
	if len(p.stages) > 0 {
		return p.stages[len(p.stages)-1].Build.Name
	}
	switch p.kind {
	case baseEnv:
		return p.ref
	case baseImage:
		p.add(stage{Step: "base", What: "image " + p.ref, Build: service.EnvironmentBuild{Image: p.ref}})
	case baseDebian:
		pkgs := append([]string{"python3"}, p.apt...)
		pkgs = append(pkgs, p.e2bExtra...)
		if p.needPip {
			pkgs = append(pkgs, "python3-pip")
		}
		slices.Sort(pkgs)
		pkgs = slices.Compact(pkgs)
		st := stage{Step: "base", What: "Debian packages", Build: service.EnvironmentBuild{Debian: pkgs, Suite: p.suite}}
		if !p.noCache {
			st.Shared, st.Build.Name = true, debianStageName(p.suite, pkgs)
		}
		p.add(st)
	default:
		return ""
	}
	return p.stages[len(p.stages)-1].Build.Name
}

// rootImage is close's environment where an image is needed (a
// Dockerfile's FROM): the host's root is none, so its Debian twin (the
// host's release with python3) is built for it.
func (p *planner) rootImage() string {
	from := p.close()
	if from == "" {
		p.kind, p.suite = baseDebian, ""
		from = p.close()
	}
	return from
}

// add appends a stage, named as the chain's next (prefix.N) unless it
// is a shared one.
func (p *planner) add(st stage) {
	if !st.Shared {
		st.Build.Name = p.prefix + "." + strconv.Itoa(len(p.stages)+1)
	}
	p.stages = append(p.stages, st)
}

// finish ends the chain: the pip packages are a layer over the root built
// so far; a template that built nothing of its own (or only a shared
// Debian root) still records an environment of its own: a copy of its
// root (an empty Dockerfile stage), with its metadata.
func (p *planner) finish() {
	from := p.close()
	switch {
	case len(p.reqs) > 0:
		p.add(stage{Step: p.reqStep, What: "pip packages", Build: service.EnvironmentBuild{Requirements: p.reqs, Base: from}})
	case len(p.stages) == 0 || p.stages[len(p.stages)-1].Shared:
		if from == "" {
			from = p.rootImage()
		}
		p.add(stage{Step: "finalize", What: "metadata", Build: service.EnvironmentBuild{Dockerfile: "FROM " + from + "\n"}})
	}
}

// debianStageName names the shared Debian root of a release and package
// set; the name's pattern is a stage's, so that it is no template.
func debianStageName(suite string, pkgs []string) string {
	h := sha256.Sum256([]byte(suite + "\n" + strings.Join(pkgs, "\n")))
	return "e2b-debian.b" + hex.EncodeToString(h[:4]) + ".0"
}

func envLine(k, v string) string { return "ENV " + k + "=" + jsonString(v) + "\n" }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func jsonArray(s ...string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// mcpPull is the command Template.addMcpServer adds (as root, on the
// mcp-gateway template): "mcp-gateway pull NAME...".
var mcpPull = regexp.MustCompile(`^mcp-gateway pull((?: [A-Za-z0-9][A-Za-z0-9_.-]{0,63})+)$`)

// GatewayServers are the MCP servers a template's addMcpServer steps name,
// in order: the operator must allow each as a gateway server.
func GatewayServers(spec Spec) []string {
	var out []string
	for _, st := range spec.Steps {
		if !strings.EqualFold(st.Type, "RUN") || len(st.Args) == 0 {
			continue
		}
		if m := mcpPull.FindStringSubmatch(st.Args[0]); m != nil {
			out = append(out, strings.Fields(m[1])...)
		}
	}
	return out
}
