package envbuild

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// Where the host's apt finds its packages.
var (
	sourcesList = "/etc/apt/sources.list"
	sourcesDir  = "/etc/apt/sources.list.d"
)

// HostSource is the host's first Debian source of binary packages: the
// mirror and suite a build uses when its options name none, from
// /etc/apt/sources.list (one-line form) or /etc/apt/sources.list.d/*.sources
// (deb822). ok is false when the host names none.
func HostSource() (mirror, suite string, ok bool) {
	if m, s, ok := oneLineSource(sourcesList); ok {
		return m, s, true
	}
	files, _ := filepath.Glob(filepath.Join(sourcesDir, "*.sources"))
	for _, f := range files {
		if m, s, ok := deb822Source(f); ok {
			return m, s, true
		}
	}
	return "", "", false
}

// oneLineSource reads the first "deb [options] uri suite ..." line.
func oneLineSource(path string) (mirror, suite string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") {
			// Options run to the field that ends with "]".
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) >= 2 && isMirrorURL(fields[0]) {
			return fields[0], fields[1], true
		}
	}
	return "", "", false
}

// deb822Source reads the first enabled stanza of Types "deb" with a URI
// and a suite, skipping the security and update suites (a root is built
// from the release; apt upgrades from the others).
func deb822Source(path string) (mirror, suite string, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", false
	}
	for stanza := range strings.SplitSeq(string(data), "\n\n") {
		fields := map[string]string{}
		for line := range strings.SplitSeq(stanza, "\n") {
			if strings.HasPrefix(line, "#") || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") {
				continue
			}
			k, v, found := strings.Cut(line, ":")
			if found {
				fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
		if strings.EqualFold(fields["enabled"], "no") || !hasField(fields["types"], "deb") {
			continue
		}
		uris, suites := strings.Fields(fields["uris"]), strings.Fields(fields["suites"])
		if len(uris) == 0 || !isMirrorURL(uris[0]) {
			continue
		}
		for _, s := range suites {
			if !strings.Contains(s, "-") && !strings.Contains(s, "/") {
				return uris[0], s, true
			}
		}
	}
	return "", "", false
}

func hasField(list, want string) bool {
	for f := range strings.FieldsSeq(list) {
		if f == want {
			return true
		}
	}
	return false
}
