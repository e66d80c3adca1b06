package templateplan

import (
	"slices"
	"strings"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/service"
)

// The base a template starts from: E2B's own templates and images (the
// host's root stands for them), a Debian-family image, an environment
// built here, or an image to pull.

// builtinTemplates are E2B's own templates that codecage serves, with
// the operator's default profiles: the aliases Template.exists finds.
var builtinTemplates = map[string]bool{"base": true, "code-interpreter-v1": true, "code-interpreter": true, "code-interpreter-stateful": true,
	// E2B's MCP gateway's: the base here, its gateway served from outside.
	"mcp-gateway": true}

// Builtin reports whether name is one of E2B's own templates.
func Builtin(name string) bool { return builtinTemplates[name] }

// Untagged drops E2B's default tag from a template or snapshot id
// ("name:default" is "name").
func Untagged(id string) string { return strings.TrimSuffix(id, ":default") }

// e2bBasePackages are what a Debian root standing for E2B's base image
// has beyond python3: what programs written for E2B expect of it.
var e2bBasePackages = []string{"python3-pip", "nodejs"}

// codeInterpreterPackages are what one standing for E2B's code
// interpreter has beyond those: the data-science packages its runCode
// imports, Debian's, as the host's root that stands for it has them.
var codeInterpreterPackages = []string{"python3-numpy", "python3-pandas", "python3-scipy", "python3-matplotlib", "python3-sympy", "python3-sklearn", "python3-requests"}

// e2bPackages is what a Debian root standing for E2B's template or image
// ref (one BuiltinBase names) has beyond python3.
func e2bPackages(ref string) []string {
	if strings.HasPrefix(ref, "code-interpreter") {
		return append(slices.Clone(e2bBasePackages), codeInterpreterPackages...)
	}
	return e2bBasePackages
}

// BuiltinBase reports whether an image or template is one codecage's host
// root stands for: E2B's base image and its own templates.
func BuiltinBase(ref string) bool {
	return ref == "e2bdev/base" || strings.HasPrefix(ref, "e2bdev/base:") || builtinTemplates[ref]
}

// debianFamily maps debian:, python: and ubuntu: images to a Debian
// release: "" is the host's (the default variants), else the codename.
// A python: or ubuntu: image is approximated by the host's Debian with
// its python3.
func debianFamily(ref string) (suite string, ok bool) {
	ref = strings.TrimPrefix(strings.TrimPrefix(ref, "docker.io/"), "library/")
	repo, tag, _ := strings.Cut(ref, ":")
	tag = strings.TrimSuffix(strings.TrimSuffix(tag, "-slim"), "slim")
	switch repo {
	case "python", "ubuntu":
		return "", true
	case "debian":
	default:
		return "", false
	}
	switch tag {
	case "", "stable", "latest":
		return "", true
	case "12":
		return "bookworm", true
	case "13":
		return "trixie", true
	}
	if codename.MatchString(tag) {
		return tag, true
	}
	return "", false
}

func (p *planner) base(spec Spec, exists Lookup) error {
	if len(spec.FromImageRegistry) > 0 && string(spec.FromImageRegistry) != "null" {
		return &stepError{Step: "base", Message: "fromImage with registry credentials, fromAWSRegistry and fromGCPRegistry are not supported: codecage pulls only images it can reach without credentials"}
	}
	switch {
	case spec.FromImage != "" && spec.FromTemplate != "":
		return &stepError{Step: "base", Message: "a template names fromImage or fromTemplate, not both"}
	case spec.FromTemplate != "":
		t := Untagged(spec.FromTemplate)
		switch {
		case BuiltinBase(t):
			p.kind, p.e2bExtra = baseHost, e2bPackages(t)
		default:
			e, ok := exists(t)
			if ok {
				p.fromEnv(e)
				return nil
			}
			return &stepError{Step: "base", Message: "template " + service.Quote(t) + " not found: fromTemplate names a template built here or E2B's base"}
		}
		return nil
	}
	ref := spec.FromImage
	if ref == "" {
		ref = "e2bdev/base"
	}
	if len(ref) > 512 || strings.ContainsAny(ref, " \t\r\n\"\\") {
		return &stepError{Step: "base", Message: "fromImage " + service.Quote(ref) + " is not an image reference"}
	}
	if suite, ok := debianFamily(ref); ok {
		p.debianFamily = true
		p.kind, p.suite = baseHost, suite
		if suite != "" {
			p.kind = baseDebian
		}
		return nil
	}
	if BuiltinBase(ref) {
		p.kind, p.e2bExtra = baseHost, e2bPackages(ref)
		return nil
	}
	if e, ok := exists(ref); ok {
		p.fromEnv(e)
		return nil
	}
	p.kind, p.ref = baseImage, ref
	return nil
}

// fromEnv starts from an environment, as E2B's fromTemplate does from a
// template: its root is the base, its variables, working directory and
// commands carry on, and its packages layer is installed again in the
// template's own (layers do not stack), after its requirements.
func (p *planner) fromEnv(e envstore.Env) {
	p.kind, p.ref = baseEnv, e.Name
	if e.LayerDir != "" {
		p.ref = e.Base // the environment whose root the layer is on
		if p.ref == "" {
			p.kind = baseHost
		}
		p.reqs, p.reqStep, p.needPip = append(p.reqs, e.Source.Packages...), "base", true
	}
	keys := make([]string, 0, len(e.Vars))
	for k := range e.Vars {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		p.setVar(k, e.Vars[k])
	}
	p.workdir, p.startCmd, p.readyCmd = e.Workdir, e.StartCmd, e.ReadyCmd
}
