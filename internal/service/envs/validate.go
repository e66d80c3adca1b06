package envs

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/codecage/codecage/internal/bounded"
	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/policy"
	"github.com/codecage/codecage/internal/service/errdefs"
)

// Bounds of an environment build's request: far above real recipes, far
// below what would make a record, a log line or a check expensive.
const (
	maxEnvRequirements = 500
	maxEnvDebian       = 1000
	maxDebianName      = 128
	maxEnvPreimport    = 64
	maxModuleName      = 100
	maxEnvCmd          = 4096
	maxEnvPath         = 4096
	maxEnvVars         = 128
	maxEnvVarValue     = 4096
	maxDockerfile      = 1 << 20
	maxSuite           = 64
)

var (
	debianPackage = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debianSuite   = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	moduleName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	envVarName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// CheckName refuses a name outside envstore.NamePattern.
func CheckName(name string) error {
	if !envstore.NamePattern.MatchString(name) {
		return fmt.Errorf("%w: %w; got %s", errdefs.ErrInvalidRequest, envstore.ErrBadName, bounded.Quote(name))
	}
	return nil
}

// Check refuses a malformed build request before anything runs, and puts
// its lists in the form the build uses (trimmed, comments dropped).
func Check(b *BuildRequest) error {
	if err := CheckName(b.Name); err != nil {
		return err
	}
	var reqs []string
	for _, l := range b.Requirements {
		if l = requirementLine(l); l != "" {
			reqs = append(reqs, l)
		}
	}
	b.Requirements = reqs
	// In this order: the first that fails says why.
	for _, check := range []func(*BuildRequest) error{checkSource, checkRequirements, checkDebian, checkImage, checkStart, checkVars} {
		if err := check(b); err != nil {
			return fmt.Errorf("%w: environment %s: %v", errdefs.ErrInvalidRequest, b.Name, err)
		}
	}
	return nil
}

// checkSource wants exactly one source, and a base only under
// requirements.
func checkSource(b *BuildRequest) error {
	sources := 0
	for _, set := range []bool{len(b.Requirements) > 0, len(b.Debian) > 0, b.Image != "", b.Dockerfile != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return fmt.Errorf("give exactly one source: requirements, Debian packages, an image or a Dockerfile (got %d)", sources)
	}
	if b.Base != "" {
		if len(b.Requirements) == 0 {
			return errors.New("a base environment goes only with requirements (a Dockerfile names its own in FROM)")
		}
		if err := CheckName(b.Base); err != nil {
			return fmt.Errorf("base: %v", err)
		}
	}
	return nil
}

func checkRequirements(b *BuildRequest) error {
	if len(b.Requirements) > maxEnvRequirements {
		return fmt.Errorf("%d requirements; at most %d", len(b.Requirements), maxEnvRequirements)
	}
	for _, l := range b.Requirements {
		if _, err := parseRequirementLine(l); err != nil {
			return fmt.Errorf("requirement %s: %v", bounded.Quote(l), err)
		}
	}
	return nil
}

// checkDebian checks the Debian packages (trimming them) and the suite.
func checkDebian(b *BuildRequest) error {
	if len(b.Debian) > maxEnvDebian {
		return fmt.Errorf("%d Debian packages; at most %d", len(b.Debian), maxEnvDebian)
	}
	for i, p := range b.Debian {
		b.Debian[i] = strings.TrimSpace(p)
		if len(b.Debian[i]) > maxDebianName || !debianPackage.MatchString(b.Debian[i]) {
			return fmt.Errorf("Debian package %s: want a Debian package name (a-z, 0-9, '+', '.', '-'; at most %d)", bounded.Quote(p), maxDebianName)
		}
	}
	if b.Suite != "" && (len(b.Suite) > maxSuite || !debianSuite.MatchString(b.Suite)) {
		return fmt.Errorf("suite %s: want a Debian release name such as bookworm", bounded.Quote(b.Suite))
	}
	if b.Suite != "" && len(b.Debian) == 0 {
		return errors.New("a suite goes only with Debian packages")
	}
	return nil
}

// checkImage checks the image, the Dockerfile and its build context.
func checkImage(b *BuildRequest) error {
	if err := checkText("image", b.Image, maxEnvPath); err != nil {
		return err
	}
	if len(b.Dockerfile) > maxDockerfile {
		return fmt.Errorf("the Dockerfile is %d bytes; at most %d", len(b.Dockerfile), maxDockerfile)
	}
	if err := checkText("Dockerfile", b.Dockerfile, maxDockerfile); err != nil {
		return err
	}
	if b.ContextDir != "" {
		if b.Dockerfile == "" {
			return errors.New("a build context goes only with a Dockerfile")
		}
		if err := checkAbsPath("context directory", b.ContextDir); err != nil {
			return err
		}
	}
	return nil
}

// checkStart checks what the sandboxes start with: pre-imports, start
// and ready commands, working directory.
func checkStart(b *BuildRequest) error {
	if len(b.Preimport) > maxEnvPreimport {
		return fmt.Errorf("%d modules to pre-import; at most %d", len(b.Preimport), maxEnvPreimport)
	}
	for _, m := range b.Preimport {
		if len(m) > maxModuleName || !moduleName.MatchString(m) {
			return fmt.Errorf("pre-import %s: want a module name such as numpy or os.path", bounded.Quote(m))
		}
	}
	for what, v := range map[string]string{"start command": b.StartCmd, "ready command": b.ReadyCmd} {
		if err := checkText(what, v, maxEnvCmd); err != nil {
			return err
		}
	}
	if b.Workdir != "" {
		if err := checkAbsPath("workdir", b.Workdir); err != nil {
			return err
		}
	}
	return nil
}

func checkVars(b *BuildRequest) error {
	if len(b.Vars) > maxEnvVars {
		return fmt.Errorf("%d variables; at most %d", len(b.Vars), maxEnvVars)
	}
	for k, v := range b.Vars {
		if !envVarName.MatchString(k) {
			return fmt.Errorf("variable %s: want a name of letters, digits and '_', not starting with a digit", bounded.Quote(k))
		}
		if err := checkText("variable "+k, v, maxEnvVarValue); err != nil {
			return err
		}
	}
	return nil
}

// requirementLine is a requirements file's line without its comment and
// surrounding space ("": nothing to install).
func requirementLine(l string) string {
	if i := strings.Index(l, "#"); i >= 0 {
		l = l[:i]
	}
	return strings.TrimSpace(l)
}

// parseRequirementLine reads "name[extras] specifiers" with the checks of
// pip_install: no options, URLs, paths or markers; the blocked packages
// are refused later, with the precheck.
func parseRequirementLine(l string) (policy.Requirement, error) {
	name, spec := l, ""
	if i := strings.IndexAny(l, "=<>!~"); i >= 0 {
		name, spec = l[:i], l[i:]
	}
	r, err := policy.ParseRequirement(strings.TrimSpace(name), strings.TrimSpace(spec))
	if err != nil {
		return r, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), policy.ErrBadPackage.Error()+": "))
	}
	return r, nil
}

// checkText refuses bytes no command, path or value holds, and length.
func checkText(what, v string, max int) error {
	switch {
	case len(v) > max:
		return fmt.Errorf("the %s is longer than %d bytes", what, max)
	case !utf8.ValidString(v):
		return fmt.Errorf("the %s is not valid UTF-8", what)
	case strings.ContainsRune(v, 0):
		return fmt.Errorf("the %s contains a NUL byte", what)
	}
	return nil
}

// checkAbsPath wants a clean absolute path.
func checkAbsPath(what, p string) error {
	if err := checkText(what, p, maxEnvPath); err != nil {
		return err
	}
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("the %s %s is not a clean absolute path", what, bounded.Quote(p))
	}
	return nil
}
