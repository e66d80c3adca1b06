package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestNormalizePackageName(t *testing.T) {
	cases := map[string]string{
		"requests":           "requests",
		"Requests":           "requests",
		"typing_extensions":  "typing-extensions",
		"Typing.Extensions":  "typing-extensions",
		"zope.interface":     "zope-interface",
		"a-_.b":              "a-b",
		"A__B--C..D":         "a-b-c-d",
		"ruamel.yaml":        "ruamel-yaml",
		"python-dateutil":    "python-dateutil",
		"Flask_SQLAlchemy":   "flask-sqlalchemy",
		"x":                  "x",
		"":                   "",
		"trailing_":          "trailing-",
		"PyYAML":             "pyyaml",
		"charset_normalizer": "charset-normalizer",
	}
	for in, want := range cases {
		if got := NormalizePackageName(in); got != want {
			t.Errorf("NormalizePackageName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRequirementValid(t *testing.T) {
	cases := []struct {
		pkg, version string
		want         Requirement
		arg          string
	}{
		{"requests", "", Requirement{"requests", "requests", nil, ""}, "requests"},
		{"requests", "latest", Requirement{"requests", "requests", nil, ""}, "requests"},
		{"requests", "LATEST", Requirement{"requests", "requests", nil, ""}, "requests"},
		{" requests ", " 2.31.0 ", Requirement{"requests", "requests", nil, "==2.31.0"}, "requests==2.31.0"},
		{"requests", "2.31.0", Requirement{"requests", "requests", nil, "==2.31.0"}, "requests==2.31.0"},
		{"Typing_Extensions", "4.12.2", Requirement{"Typing_Extensions", "typing-extensions", nil, "==4.12.2"}, "Typing_Extensions==4.12.2"},
		{"requests[socks]", "==2.31.0", Requirement{"requests", "requests", []string{"socks"}, "==2.31.0"}, "requests[socks]==2.31.0"},
		{"requests[socks,use_chardet_on_py3]", "", Requirement{"requests", "requests", []string{"socks", "use_chardet_on_py3"}, ""}, "requests[socks,use_chardet_on_py3]"},
		{"requests[]", "", Requirement{"requests", "requests", nil, ""}, "requests"},
		{"x", "1", Requirement{"x", "x", nil, "==1"}, "x==1"},
		{"zope.interface", "~=6.0", Requirement{"zope.interface", "zope-interface", nil, "~=6.0"}, "zope.interface~=6.0"},
		{"numpy", ">=1.0,<2", Requirement{"numpy", "numpy", nil, ">=1.0,<2"}, "numpy>=1.0,<2"},
		{"numpy", ">= 1.0 , < 2", Requirement{"numpy", "numpy", nil, ">=1.0,<2"}, "numpy>=1.0,<2"},
		{"numpy", "==1.26.*", Requirement{"numpy", "numpy", nil, "==1.26.*"}, "numpy==1.26.*"},
		{"numpy", "1.26.*", Requirement{"numpy", "numpy", nil, "==1.26.*"}, "numpy==1.26.*"},
		{"numpy", "!=1.25.*,>=1.24", Requirement{"numpy", "numpy", nil, "!=1.25.*,>=1.24"}, "numpy!=1.25.*,>=1.24"},
		{"numpy", "===1.26.4", Requirement{"numpy", "numpy", nil, "===1.26.4"}, "numpy===1.26.4"},
		{"pkg", "1.0rc1", Requirement{"pkg", "pkg", nil, "==1.0rc1"}, "pkg==1.0rc1"},
		{"pkg", "1.0.post2.dev3", Requirement{"pkg", "pkg", nil, "==1.0.post2.dev3"}, "pkg==1.0.post2.dev3"},
		{"pkg", "1!2.0", Requirement{"pkg", "pkg", nil, "==1!2.0"}, "pkg==1!2.0"},
		{"pkg", "v1.0", Requirement{"pkg", "pkg", nil, "==v1.0"}, "pkg==v1.0"},
		{"pkg", "1.0+local.7", Requirement{"pkg", "pkg", nil, "==1.0+local.7"}, "pkg==1.0+local.7"},
		{"pkg", "1.0-1", Requirement{"pkg", "pkg", nil, "==1.0-1"}, "pkg==1.0-1"},
		{"pkg", "<3.0a1", Requirement{"pkg", "pkg", nil, "<3.0a1"}, "pkg<3.0a1"},
		{"pkg", ">2,<=4.5,!=3.1", Requirement{"pkg", "pkg", nil, ">2,<=4.5,!=3.1"}, "pkg>2,<=4.5,!=3.1"},
		{strings.Repeat("a", 100), "", Requirement{strings.Repeat("a", 100), strings.Repeat("a", 100), nil, ""}, strings.Repeat("a", 100)},
	}
	for _, c := range cases {
		got, err := ParseRequirement(c.pkg, c.version)
		if err != nil {
			t.Errorf("ParseRequirement(%q, %q): %v", c.pkg, c.version, err)
			continue
		}
		if got.Name != c.want.Name || got.Normalized != c.want.Normalized || got.Specifier != c.want.Specifier ||
			!slices.Equal(got.Extras, c.want.Extras) {
			t.Errorf("ParseRequirement(%q, %q) = %+v, want %+v", c.pkg, c.version, got, c.want)
		}
		if s := got.String(); s != c.arg {
			t.Errorf("ParseRequirement(%q, %q).String() = %q, want %q", c.pkg, c.version, s, c.arg)
		}
	}
}

func TestParseRequirementRefusesBadPackages(t *testing.T) {
	cases := []struct {
		pkg  string
		hint string // a piece of the message that says why
	}{
		{"", "is empty"},
		{"   ", "is empty"},
		{"--index-url=http://x", "pip options"},
		{"-e", "pip options"},
		{"-r requirements.txt", "pip options"},
		{"--extra-index-url", "pip options"},
		{"git+https://github.com/psf/requests", "URL"},
		{"https://evil.example/requests.tar.gz", "URL"},
		{"file:///tmp/x.whl", "URL"},
		{"hg+http://x/y", "URL"},
		{"foo @ https://x", "URL"},
		{"foo@bar", "direct references"},
		{"requests==1; import os", "environment markers"},
		{"requests; python_version<'3'", "environment markers"},
		{"../x", "path"},
		{"./x", "path"},
		{"/tmp/x.whl", "path"},
		{"x/y", "path"},
		{`C:\x.whl`, "path"},
		{"~/x", "path"},
		{".hidden", "path"},
		{"requests==2.31.0", "give the version separately"},
		{"requests>=2", "give the version separately"},
		{"requests~=2.0", "give the version separately"},
		{"requests!=2", "give the version separately"},
		{"name\x00", "NUL"},
		{"req\x00uests", "NUL"},
		{"requests\n--index-url", "control character"},
		{"requests\t", "control character"},
		{"requests\r", "control character"},
		{"requests\x7f", "control character"},
		{"requ\u0435sts", "non-ASCII"},      // Cyrillic е
		{"ｒequests", "non-ASCII"},           // full-width r
		{"numpy\u200b", "non-ASCII"},        // zero-width space
		{"reque\xffsts", "not valid UTF-8"}, // broken encoding
		{"req uests", "whitespace"},
		{"requests [socks]", "whitespace"},
		{"requests[socks, http2]", "whitespace"},
		{strings.Repeat("a", 101), "longer than 100"},
		{"requests[" + strings.Repeat("b", 95) + "]", "longer than 100"},
		{"_requests", "not a valid project name"},
		{"requests_", "not a valid project name"},
		{"requests-", "not a valid project name"},
		{"req$uests", "not a valid project name"},
		{"req'uests", "not a valid project name"},
		{"requests[socks", "not a valid project name"},
		{"requests]", "not a valid project name"},
		{"requests[[x]]", "not a valid project name"},
		{"requests[x]y", "not a valid project name"},
		{"requests[-x]", "invalid extra"},
		{"requests[a,,b]", "invalid extra"},
		{"requests[$(id)]", "invalid extra"},
		{"requests(1.0)", "not a valid project name"},
		{"`id`", "not a valid project name"},
		{"$(id)", "not a valid project name"},
		{"a|b", "not a valid project name"},
		{"*", "not a valid project name"},
	}
	for _, c := range cases {
		_, err := ParseRequirement(c.pkg, "")
		if err == nil {
			t.Errorf("ParseRequirement(%q) accepted", c.pkg)
			continue
		}
		if !errors.Is(err, ErrBadPackage) {
			t.Errorf("ParseRequirement(%q): %v does not wrap ErrBadPackage", c.pkg, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.hint) {
			t.Errorf("ParseRequirement(%q): %q does not say %q", c.pkg, msg, c.hint)
		}
		// The message says what would do instead.
		if !strings.Contains(msg, `such as "requests"`) {
			t.Errorf("ParseRequirement(%q): %q does not say what is accepted", c.pkg, msg)
		}
		// No raw control byte of the caller's reaches the message.
		if strings.ContainsAny(msg, "\x00\n\r\t\x7f") {
			t.Errorf("ParseRequirement(%q): message %q carries a control character", c.pkg, msg)
		}
	}
}

func TestParseRequirementRefusesBadVersions(t *testing.T) {
	cases := []struct {
		version string
		hint    string
	}{
		{"--index-url=http://x", "pip options"},
		{"-1", "pip options"},
		{"1.0 --pre", "whitespace"},
		{"https://x/y.whl", "URL"},
		{"git+https://x", "URL"},
		{"@ https://x", "URL"},
		{"@1.0", "direct references"},
		{"1.0; import os", "environment markers"},
		{"==1.0;python_version>'3'", "environment markers"},
		{"../x", "path"},
		{"/tmp/x.whl", "path"},
		{"1.0/2", "path"},
		{"1.0\x00", "NUL"},
		{"1.0\n", "control character"},
		{"\t1.0", "control character"},
		{"１.0", "non-ASCII"},
		{"1.0.0", ""}, // valid; listed below
		{"1. 0", "whitespace"},
		{"== 1. 0", "whitespace inside the version"},
		{"abc", "not a PEP 440 version"},
		{"1.0.x", "not a PEP 440 version"},
		{"*", "not a PEP 440 version"},
		{"1..0", "not a PEP 440 version"},
		{"=1.0", "unknown operator"},
		{"=>1.0", "unknown operator"},
		{"1.0==", "not a PEP 440 version"},
		{"!1.0", "unknown operator"},
		{"====1.0", "malformed"},
		{"==", "without a version"},
		{">=1.0,", "stray comma"},
		{",>=1.0", "stray comma"},
		{">=1.0,,<2", "stray comma"},
		{">=1.0,2.0", "without an operator"},
		{">=1.*", "wildcard"},
		{"~=1.*", "wildcard"},
		{"<2.*", "wildcard"},
		{"===1.*", "wildcard"},
		{"~=1", "not a valid PEP 440 version for ~="},
		{">=1.0+local", "not a valid PEP 440 version for >="},
		{"<1.0+local", "not a valid PEP 440 version for <"},
		{"~=1.0+local", "not a valid PEP 440 version for ~="},
		{"==1.0.*+local", "not a valid PEP 440 version"},
		{"==1.0rc1.*", "wildcard"},
		{"==1.0$", "not a valid PEP 440 version"},
		{"==$(id)", "not a valid PEP 440 version"},
		{">=" + strings.Repeat("1.", 100) + "0", "longer than 200"},
	}
	for _, c := range cases {
		_, err := ParseRequirement("requests", c.version)
		if c.hint == "" {
			if err != nil {
				t.Errorf("version %q: %v", c.version, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("version %q accepted", c.version)
			continue
		}
		if !errors.Is(err, ErrBadPackage) {
			t.Errorf("version %q: %v does not wrap ErrBadPackage", c.version, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.hint) {
			t.Errorf("version %q: %q does not say %q", c.version, msg, c.hint)
		}
		if !strings.Contains(msg, `"latest"`) || !strings.Contains(msg, `">=1.0,<2"`) {
			t.Errorf("version %q: %q does not say what is accepted", c.version, msg)
		}
	}
}

func TestErrorMessagesAreBounded(t *testing.T) {
	long := strings.Repeat("A", 5000) + "/"
	_, err := ParseRequirement(long, "")
	if err == nil || len(err.Error()) > 600 {
		t.Fatalf("a long value must be cut short in the message: %d bytes", len(err.Error()))
	}
}

func TestCheckBlocked(t *testing.T) {
	for _, name := range DefaultBlockedPackages {
		if NormalizePackageName(name) != name {
			t.Errorf("DefaultBlockedPackages: %q is not normalized", name)
		}
	}
	for _, name := range []string{"os", "subprocess", "sys", "importlib", "ctypes", "multiprocessing", "threading", "pip"} {
		if !slices.Contains(DefaultBlockedPackages, name) {
			t.Errorf("DefaultBlockedPackages lacks %q", name)
		}
	}
	for _, name := range []string{"setuptools", "wheel", "setuptools-scm-git-archive"} {
		if slices.Contains(DefaultBlockedPackages, name) {
			t.Errorf("DefaultBlockedPackages holds %q", name)
		}
	}

	blocked := []string{"os", "Sub_Process", " pip ", "ruamel.yaml"}
	cases := []struct {
		pkg     string
		blocked bool
	}{
		{"os", true},
		{"OS", true},
		{"sub-process", true},
		{"sub.process", true},
		{"Pip", true},
		{"ruamel-yaml", true},
		{"ruamel_yaml[jinja2]", true},
		{"osx", false},
		{"subprocess", false},
		{"requests", false},
		{"pip-tools", false},
	}
	for _, c := range cases {
		r, err := ParseRequirement(c.pkg, "")
		if err != nil {
			t.Fatal(err)
		}
		err = CheckBlocked(r, blocked)
		if (err != nil) != c.blocked {
			t.Errorf("CheckBlocked(%q) = %v, want blocked %v", c.pkg, err, c.blocked)
			continue
		}
		if err != nil && (!errors.Is(err, ErrBadPackage) || !strings.Contains(err.Error(), "SANDBOX_BLOCKED_PACKAGES")) {
			t.Errorf("CheckBlocked(%q): %v must wrap ErrBadPackage and name SANDBOX_BLOCKED_PACKAGES", c.pkg, err)
		}
	}
	// A Requirement built by hand is normalized on the spot.
	if err := CheckBlocked(Requirement{Name: "Multi_Processing"}, []string{"multi-processing"}); err == nil {
		t.Error("an unnormalized Requirement slipped past the list")
	}
	if err := CheckBlocked(Requirement{Name: "os"}, nil); err != nil {
		t.Errorf("an empty list blocks nothing: %v", err)
	}
	for _, name := range []string{"setuptools", "wheel", "requests"} {
		r, _ := ParseRequirement(name, "")
		if err := CheckBlocked(r, DefaultBlockedPackages); err != nil {
			t.Errorf("the default list blocks %q: %v", name, err)
		}
	}
	r, _ := ParseRequirement("Multiprocessing", "")
	if err := CheckBlocked(r, DefaultBlockedPackages); err == nil {
		t.Error("the default list lets multiprocessing through")
	}
}

func TestPopularPackages(t *testing.T) {
	if n := len(PopularPackages); n < 140 || n > 180 {
		t.Errorf("PopularPackages has %d names, want about 150", n)
	}
	seen := map[string]bool{}
	for _, p := range PopularPackages {
		if NormalizePackageName(p) != p || !pep508Name.MatchString(p) {
			t.Errorf("PopularPackages: %q is not a normalized name", p)
		}
		if seen[p] {
			t.Errorf("PopularPackages: %q twice", p)
		}
		seen[p] = true
		if s, ok := Typosquat(p); ok {
			t.Errorf("Typosquat(%q) = %q: a popular name is never a typo", p, s)
		}
	}
}

func TestTyposquat(t *testing.T) {
	flagged := map[string]string{
		"reqeusts":              "requests",
		"requets":               "requests",
		"requestss":             "requests",
		"reques":                "", // two edits on a 6-character name: too far
		"numpi":                 "numpy",
		"nunpy":                 "numpy",
		"pandsa":                "pandas",
		"beautifulsoup":         "beautifulsoup4",
		"python-requests":       "requests",
		"pythonrequests":        "requests",
		"pyrequests":            "requests",
		"py-requests":           "requests",
		"requests-python":       "requests",
		"urlib3":                "urllib3",
		"urllib-3":              "urllib3",
		"matplotlb":             "matplotlib",
		"matplotlib3":           "matplotlib",
		"djang0":                "django",
		"Reqeusts":              "requests", // normalized first
		"typingextensions":      "typing-extensions",
		"typing-extension":      "typing-extensions",
		"scikitlearn":           "scikit-learn",
		"python3-dateutil":      "python-dateutil",
		"dateutil":              "python-dateutil",
		"opencv":                "opencv-python",
		"yaml":                  "pyyaml",
		"serial":                "pyserial",
		"reqeusts-oauthlib":     "requests-oauthlib",
		"pytest-covv":           "pytest-cov",
		"cryptograpy":           "cryptography",
		"tensorfow":             "tensorflow",
		"colourama":             "colorama",
		"jinja3":                "jinja2",
		"django-rest-framework": "djangorestframework",
	}
	for name, want := range flagged {
		got, ok := Typosquat(name)
		if want == "" {
			if ok {
				t.Errorf("Typosquat(%q) = %q, want not flagged", name, got)
			}
			continue
		}
		if !ok || got != want {
			t.Errorf("Typosquat(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	clean := []string{
		"requests", "numpy", "six", "attrs", "flask", "click", "toml", "tomli", "mock", "boto",
		"requests-oauthlib", "pandas-stubs", "types-requests", "flask-cors", "pytest-env", "pytest-xdist",
		"django-environ", "docker-py", "numpy-financial", "requests-2", "google-cloud-bigquery",
		"sklearn", "aiofiles", "httplib2", "pendulum", "zope-interface", "my-internal-tool",
		// Under 4 characters: never.
		"six", "sx", "nmp", "rsq", "jwt", "pyt", "req",
	}
	for _, name := range clean {
		if got, ok := Typosquat(name); ok {
			t.Errorf("Typosquat(%q) = %q, want not flagged", name, got)
		}
	}
}

func TestTyposquatBothPopular(t *testing.T) {
	popular := []string{"python-dateutil", "dateutil", "requests"}
	for _, name := range []string{"dateutil", "python-dateutil"} {
		if s, ok := typosquatIn(name, popular); ok {
			t.Errorf("%q flagged as %q though both names are popular", name, s)
		}
	}
	if s, ok := typosquatIn("py-dateutil", popular); !ok || (s != "python-dateutil" && s != "dateutil") {
		t.Errorf("py-dateutil: %q, %v", s, ok)
	}
	if s, ok := typosquatIn("dateutil", []string{"python-dateutil"}); !ok || s != "python-dateutil" {
		t.Errorf("dateutil alone: %q, %v", s, ok)
	}
}

func TestDamerauLevenshtein(t *testing.T) {
	cases := []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"abc", "abc", 0},
		{"requests", "reqeusts", 1}, {"ab", "ba", 1}, {"abc", "bca", 2},
		{"kitten", "sitting", 3}, {"numpy", "numpi", 1}, {"ca", "abc", 3},
	}
	for _, c := range cases {
		if d := damerauLevenshtein(c.a, c.b); d != c.d {
			t.Errorf("damerauLevenshtein(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
		if d := damerauLevenshtein(c.b, c.a); d != c.d {
			t.Errorf("damerauLevenshtein(%q, %q) = %d, want %d", c.b, c.a, d, c.d)
		}
	}
}

func TestParseWheelFilename(t *testing.T) {
	cases := []struct {
		fn, name, version string
		ok                bool
	}{
		{"requests-2.31.0-py3-none-any.whl", "requests", "2.31.0", true},
		{"typing_extensions-4.12.2-py3-none-any.whl", "typing-extensions", "4.12.2", true},
		{"Typing_Extensions-4.12.2-py3-none-any.whl", "typing-extensions", "4.12.2", true},
		{"numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "numpy", "1.26.4", true},
		{"pkg-1.0-1-py3-none-any.whl", "pkg", "1.0", true},
		{"pkg-1.0-2build-py2.py3-none-any.whl", "pkg", "1.0", true},
		{"pkg-1.0rc1.post2.dev3+local.1-py3-none-any.whl", "pkg", "1.0rc1.post2.dev3+local.1", true},
		{"zope.interface-6.0-cp311-cp311-linux_x86_64.whl", "zope-interface", "6.0", true},
		{"pkg-1.0-py3-none-any.WHL", "", "", false},
		{"pkg-1.0-py3-none-any.whl.zip", "", "", false},
		{"pkg-1.0-py3-none.whl", "", "", false},
		{"pkg-1.0-x-y-py3-none-any.whl", "", "", false},
		{"pkg-1.0-build-py3-none-any.whl", "", "", false}, // a build tag starts with a digit
		{"pkg-one-py3-none-any.whl", "", "", false},
		{"-1.0-py3-none-any.whl", "", "", false},
		{"pkg-1.0--none-any.whl", "", "", false},
		{"pkg-1.0-py3-none-an$y.whl", "", "", false},
		{"../pkg-1.0-py3-none-any.whl", "", "", false},
		{"dir/pkg-1.0-py3-none-any.whl", "", "", false},
		{"pkg-1.0.tar.gz", "", "", false},
		{".whl", "", "", false},
		{"", "", "", false},
	}
	for _, c := range cases {
		name, version, ok := ParseWheelFilename(c.fn)
		if name != c.name || version != c.version || ok != c.ok {
			t.Errorf("ParseWheelFilename(%q) = %q, %q, %v; want %q, %q, %v", c.fn, name, version, ok, c.name, c.version, c.ok)
		}
	}
}

func TestIsSdistFilename(t *testing.T) {
	cases := map[string]bool{
		"requests-2.31.0.tar.gz":           true,
		"requests-2.31.0.zip":              true,
		"requests-2.31.0.tar.bz2":          true,
		"Requests-2.31.0.TAR.GZ":           true,
		"pkg.tar.gz":                       true,
		"requests-2.31.0-py3-none-any.whl": false,
		"pkg-1.0-py3-none-any.whl.zip":     false,
		"requests-2.31.0.tar":              false,
		"requests-2.31.0.tar.xz":           false,
		"requests-2.31.0.tgz":              false,
		".tar.gz":                          false,
		"dir/pkg-1.0.tar.gz":               false,
		"":                                 false,
	}
	for fn, want := range cases {
		if got := IsSdistFilename(fn); got != want {
			t.Errorf("IsSdistFilename(%q) = %v, want %v", fn, got, want)
		}
	}
}
