package policy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// ErrBadPackage is wrapped by every error of the package checks, so that
// callers can tell a refused request from a failure of their own.
var ErrBadPackage = errors.New("bad package")

// MaxPackageArg is the longest package argument (name and extras) accepted.
const MaxPackageArg = 100

// maxVersionArg bounds the version argument; real specifier lists are far
// shorter.
const maxVersionArg = 200

const (
	wantPackage = `want a PyPI project name such as "requests" or "requests[socks]" ` +
		`(ASCII letters, digits, ".", "_" and "-", at most 100 characters)`
	wantVersion = `want "latest", a version such as "2.31.0", or specifiers such as ">=1.0,<2" ` +
		`(operators ==, !=, <=, >=, <, >, ~=, ===; ".*" only after == and !=)`
)

// pep508Name is the project-name grammar of PEP 508.
var pep508Name = regexp.MustCompile(`^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$`)

// packageArg splits "name[extras]"; the parts are checked separately.
var packageArg = regexp.MustCompile(`^([^\[\]]+)(?:\[([^\[\]]*)\])?$`)

// The PEP 440 version grammar, split so that each operator gets the forms
// it allows (packaging's Specifier does the same).
const (
	pepRelease = `v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*`
	pepSuffix  = `(?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?` +
		`(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?` +
		`(?:[-_.]?dev[-_.]?[0-9]*)?`
	pepLocal = `(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?`
)

var (
	versionFull     = regexp.MustCompile(`(?i)^` + pepRelease + pepSuffix + pepLocal + `$`)
	versionNoLocal  = regexp.MustCompile(`(?i)^` + pepRelease + pepSuffix + `$`)
	versionWildcard = regexp.MustCompile(`(?i)^` + pepRelease + `\.\*$`)
	// ~= needs at least two release segments to mean anything.
	versionCompatible = regexp.MustCompile(`(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)+` + pepSuffix + `$`)
)

// specOperators, longest first so that "===" is not read as "==".
var specOperators = []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"}

// NormalizePackageName is the PEP 503 normalized form of a project name:
// runs of "-", "_" and "." become one "-", and letters are lower-cased.
func NormalizePackageName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	sep := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '-' || c == '_' || c == '.' {
			sep = true
			continue
		}
		if sep {
			b.WriteByte('-')
			sep = false
		}
		b.WriteByte(c)
	}
	if sep {
		b.WriteByte('-')
	}
	return strings.ToLower(b.String())
}

// Requirement is a checked pip_install request.
type Requirement struct {
	Name       string   // the project name as given
	Normalized string   // its PEP 503 form
	Extras     []string // as given, each a valid name
	// Specifier is "" for the latest version, else a PEP 440 specifier
	// list without spaces, such as "==2.31.0" or ">=1.0,<2".
	Specifier string
}

// String is the requirement as one pip argument, such as
// "name[extra1,extra2]==1.2.3". Only a Requirement from
// [ParseRequirement] is safe to hand to pip.
func (r Requirement) String() string {
	s := r.Name
	if len(r.Extras) > 0 {
		s += "[" + strings.Join(r.Extras, ",") + "]"
	}
	return s + r.Specifier
}

// ParseRequirement checks a package name (optionally with extras) and a
// version, and builds the requirement pip will get. Anything pip would read
// as something other than a project on the index is refused: URLs, paths,
// direct references, markers and options.
func ParseRequirement(pkg, version string) (Requirement, error) {
	name, extras, err := parsePackageArg(pkg)
	if err != nil {
		return Requirement{}, err
	}
	spec, err := parseVersionArg(version)
	if err != nil {
		return Requirement{}, err
	}
	return Requirement{Name: name, Normalized: NormalizePackageName(name), Extras: extras, Specifier: spec}, nil
}

func badArg(what, value, problem, want string) error {
	return fmt.Errorf("%w: %s %s %s; %s", ErrBadPackage, what, quoteArg(value), problem, want)
}

// quoteArg shortens and escapes a caller's value for an error message, so
// that a hostile one cannot flood or forge log lines.
func quoteArg(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

// checkChars refuses bytes no package name or version contains, before
// any other check looks at the value.
func checkChars(what, value, want string) error {
	if !utf8.ValidString(value) {
		return badArg(what, value, "is not valid UTF-8", want)
	}
	for i := 0; i < len(value); i++ {
		switch c := value[i]; {
		case c == 0:
			return badArg(what, value, "contains a NUL byte", want)
		case c < 0x20 || c == 0x7f:
			return badArg(what, value, "contains a control character", want)
		case c >= 0x80:
			return badArg(what, value, "contains non-ASCII characters (look-alike letters are refused: PyPI names are ASCII)", want)
		}
	}
	return nil
}

// checkInjection names what a value looks like when it is not a plain
// name or version, so that the caller learns why.
func checkInjection(what, value, want string) error {
	switch {
	case strings.HasPrefix(value, "-"):
		return badArg(what, value, "starts with \"-\": pip options are not accepted", want)
	case strings.Contains(value, "://") || hasVCSPrefix(value):
		return badArg(what, value, "is a URL: only projects on the configured index can be installed", want)
	case strings.Contains(value, "@"):
		return badArg(what, value, "contains \"@\": direct references (name @ url) are not accepted", want)
	case strings.Contains(value, ";"):
		return badArg(what, value, "contains \";\": environment markers are not accepted", want)
	case strings.ContainsAny(value, `/\`) || strings.HasPrefix(value, "."):
		return badArg(what, value, "is a path: only projects on the configured index can be installed", want)
	}
	return nil
}

func hasVCSPrefix(s string) bool {
	l := strings.ToLower(s)
	for _, p := range []string{"git+", "hg+", "svn+", "bzr+", "file:"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

func parsePackageArg(pkg string) (string, []string, error) {
	const what = "package"
	if err := checkChars(what, pkg, wantPackage); err != nil {
		return "", nil, err
	}
	pkg = strings.Trim(pkg, " ")
	if pkg == "" {
		return "", nil, badArg(what, pkg, "is empty", wantPackage)
	}
	if err := checkInjection(what, pkg, wantPackage); err != nil {
		return "", nil, err
	}
	if strings.ContainsAny(pkg, "=<>!~") {
		return "", nil, badArg(what, pkg, "contains a version specifier: give the version separately (version=\"2.31.0\")", wantPackage)
	}
	if strings.Contains(pkg, " ") {
		return "", nil, badArg(what, pkg, "contains whitespace", wantPackage)
	}
	if len(pkg) > MaxPackageArg {
		return "", nil, badArg(what, pkg, fmt.Sprintf("is longer than %d characters", MaxPackageArg), wantPackage)
	}
	m := packageArg.FindStringSubmatch(pkg)
	if m == nil || !pep508Name.MatchString(m[1]) {
		return "", nil, badArg(what, pkg, "is not a valid project name", wantPackage)
	}
	var extras []string
	if m[2] != "" {
		for _, e := range strings.Split(m[2], ",") {
			if !pep508Name.MatchString(e) {
				return "", nil, badArg(what, pkg, fmt.Sprintf("has an invalid extra %s", quoteArg(e)), wantPackage)
			}
			extras = append(extras, e)
		}
	}
	return m[1], extras, nil
}

func parseVersionArg(version string) (string, error) {
	const what = "version"
	if err := checkChars(what, version, wantVersion); err != nil {
		return "", err
	}
	version = strings.Trim(version, " ")
	if version == "" || strings.EqualFold(version, "latest") {
		return "", nil
	}
	if err := checkInjection(what, version, wantVersion); err != nil {
		return "", err
	}
	if len(version) > maxVersionArg {
		return "", badArg(what, version, fmt.Sprintf("is longer than %d characters", maxVersionArg), wantVersion)
	}
	// A bare version pins it.
	if !strings.Contains(version, ",") && !strings.ContainsAny(version[:1], "=<>!~") {
		if strings.Contains(version, " ") {
			return "", badArg(what, version, "contains whitespace", wantVersion)
		}
		if versionFull.MatchString(version) || versionWildcard.MatchString(version) {
			return "==" + version, nil
		}
		return "", badArg(what, version, "is not a PEP 440 version", wantVersion)
	}
	clauses := strings.Split(version, ",")
	out := make([]string, 0, len(clauses))
	for _, c := range clauses {
		spec, problem := parseClause(strings.Trim(c, " "))
		if problem != "" {
			return "", badArg(what, version, problem, wantVersion)
		}
		out = append(out, spec)
	}
	return strings.Join(out, ","), nil
}

// parseClause checks one "op version" clause and returns it without
// spaces, or what is wrong with it.
func parseClause(c string) (string, string) {
	if c == "" {
		return "", "has an empty specifier (stray comma)"
	}
	op := ""
	for _, o := range specOperators {
		if strings.HasPrefix(c, o) {
			op = o
			break
		}
	}
	if op == "" && strings.ContainsAny(c[:1], "=<>!~") {
		return "", fmt.Sprintf("has an unknown operator in %s", quoteArg(c))
	}
	if op == "" {
		return "", fmt.Sprintf("has a specifier %s without an operator", quoteArg(c))
	}
	v := strings.TrimLeft(c[len(op):], " ")
	switch {
	case v == "":
		return "", fmt.Sprintf("has operator %s without a version", op)
	case strings.Contains(v, " "):
		return "", fmt.Sprintf("has whitespace inside the version %s", quoteArg(v))
	case strings.ContainsAny(v, "=<>!~"):
		return "", fmt.Sprintf("has a malformed specifier %s", quoteArg(c))
	}
	var ok bool
	switch op {
	case "==", "!=":
		ok = versionFull.MatchString(v) || versionWildcard.MatchString(v)
	case "===":
		ok = versionFull.MatchString(v)
	case "~=":
		ok = versionCompatible.MatchString(v)
	default: // <, >, <=, >=: local versions and wildcards mean nothing here
		ok = versionNoLocal.MatchString(v)
	}
	if !ok {
		if strings.HasSuffix(v, ".*") {
			return "", fmt.Sprintf("uses the wildcard %s with %s (\".*\" goes only with == and !=)", quoteArg(v), op)
		}
		return "", fmt.Sprintf("has %s, which is not a valid PEP 440 version for %s", quoteArg(v), op)
	}
	return op + v, ""
}

// CheckBlocked refuses a requirement whose project is on the blocked list;
// both sides are compared PEP 503 normalized.
func CheckBlocked(r Requirement, blocked []string) error {
	n := r.Normalized
	if n == "" {
		n = NormalizePackageName(r.Name)
	}
	for _, b := range blocked {
		if NormalizePackageName(strings.TrimSpace(b)) == n {
			return fmt.Errorf("%w: %q is blocked by the operator's package policy (SANDBOX_BLOCKED_PACKAGES)", ErrBadPackage, r.Name)
		}
	}
	return nil
}

// Typosquat reports a popular project (from [PopularPackages]) that the
// name resembles without being it: one edit away (4 to 7 characters) or
// two (8 or more), the same name with a python-/py prefix or -python
// suffix added or removed, or the same name with hyphens dropped or added.
// Names under 4 characters are never flagged, nor are popular names. The
// edit distance is taken over the parts that differ: a popular name or a
// shared component plus a word of its own ("pandas-stubs", "pytest-env")
// is an extension, not a typo.
func Typosquat(normalized string) (similar string, ok bool) {
	return typosquatIn(NormalizePackageName(normalized), PopularPackages)
}

func typosquatIn(name string, popular []string) (string, bool) {
	if len(name) < 4 || slices.Contains(popular, name) {
		return "", false
	}
	core := affixCore(name)
	for _, p := range popular {
		if c := affixCore(p); len(c) >= 2 && c == core {
			return p, true
		}
	}
	bare := strings.ReplaceAll(name, "-", "")
	for _, p := range popular {
		if strings.ReplaceAll(p, "-", "") == bare {
			return p, true
		}
	}
	best, bestDist := "", 3
	for _, p := range popular {
		if d := typoDistance(name, p); d >= 0 && d < bestDist {
			best, bestDist = p, d
		}
	}
	return best, best != ""
}

// affixCore strips one conventional prefix and suffix that say "this is
// for Python", which squatters add or drop to pass for the real project.
func affixCore(name string) string {
	for _, p := range []string{"python-", "python", "py-", "py"} {
		if strings.HasPrefix(name, p) {
			name = name[len(p):]
			break
		}
	}
	return strings.TrimSuffix(name, "-python")
}

// maxTypoEdits is how many edits a name of n characters may be from a
// popular one and still be read as a typo of it.
func maxTypoEdits(n int) int {
	switch {
	case n < 4:
		return 0
	case n < 8:
		return 1
	}
	return 2
}

// typoDistance is the edit distance between name and p over the parts that
// differ once whole hyphen-separated components shared at either end are
// set aside, or -1 when that part of name is too short to count or too
// far from p's.
func typoDistance(name, p string) int {
	a, b := strings.Split(name, "-"), strings.Split(p, "-")
	for len(a) > 1 && len(b) > 1 && a[0] == b[0] {
		a, b = a[1:], b[1:]
	}
	for len(a) > 1 && len(b) > 1 && a[len(a)-1] == b[len(b)-1] {
		a, b = a[:len(a)-1], b[:len(b)-1]
	}
	// A popular name with a word added at either end is an extension.
	if len(b) == 1 && len(a) > 1 && (a[0] == b[0] || a[len(a)-1] == b[0]) {
		return -1
	}
	x, y := strings.Join(a, "-"), strings.Join(b, "-")
	limit := maxTypoEdits(len(x))
	if limit == 0 {
		return -1
	}
	d := damerauLevenshtein(x, y)
	if d == 0 || d > limit {
		return -1
	}
	return d
}

// damerauLevenshtein is the optimal-string-alignment distance: insertions,
// deletions, substitutions and swaps of adjacent bytes each cost one.
func damerauLevenshtein(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// ParseWheelFilename reads a PEP 427 wheel file name,
// {name}-{version}(-{build})?-{python}-{abi}-{platform}.whl, and returns
// the project name PEP 503 normalized and the version as written.
func ParseWheelFilename(fn string) (name, version string, ok bool) {
	stem, found := strings.CutSuffix(fn, ".whl")
	if !found || strings.ContainsAny(stem, `/\`) {
		return "", "", false
	}
	parts := strings.Split(stem, "-")
	if len(parts) != 5 && len(parts) != 6 {
		return "", "", false
	}
	if !pep508Name.MatchString(parts[0]) || !versionFull.MatchString(parts[1]) {
		return "", "", false
	}
	if len(parts) == 6 && !wheelBuildTag.MatchString(parts[2]) {
		return "", "", false
	}
	for _, tag := range parts[len(parts)-3:] {
		if !wheelTag.MatchString(tag) {
			return "", "", false
		}
	}
	return NormalizePackageName(parts[0]), parts[1], true
}

var (
	wheelBuildTag = regexp.MustCompile(`^[0-9][A-Za-z0-9_.]*$`)
	wheelTag      = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)
)

// IsSdistFilename reports whether fn is a source distribution (.tar.gz,
// .zip or .tar.bz2, case-insensitive), the kind of file a wheels-only
// install must refuse because building it runs its setup code.
func IsSdistFilename(fn string) bool {
	if strings.ContainsAny(fn, `/\`) {
		return false
	}
	l := strings.ToLower(fn)
	for _, ext := range []string{".tar.gz", ".zip", ".tar.bz2"} {
		if stem, ok := strings.CutSuffix(l, ext); ok {
			return stem != "" && !strings.HasSuffix(stem, ".whl")
		}
	}
	return false
}
