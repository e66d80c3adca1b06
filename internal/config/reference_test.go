package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestConfigurationPageIsCurrent fails when docs/configuration.md's
// reference is not what the settings table makes of it: a setting added,
// removed, reworded or given another default without the page refreshed.
func TestConfigurationPageIsCurrent(t *testing.T) {
	path := filepath.Join(moduleRoot(t), "docs", "configuration.md")
	page, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := UpdateReference(string(page))
	if err != nil {
		t.Fatal(err)
	}
	if want == string(page) {
		return
	}
	got, wantLines := strings.Split(string(page), "\n"), strings.Split(want, "\n")
	line := 0
	for line < len(got) && line < len(wantLines) && got[line] == wantLines[line] {
		line++
	}
	t.Errorf("docs/configuration.md differs from the settings table from line %d: run `go generate ./internal/config` and commit the page", line+1)
}

// TestReferenceDefaults checks the page's wording of values that have a
// unit: what it shows is what an operator would type.
func TestReferenceDefaults(t *testing.T) {
	d := DefaultConfig()
	for env, want := range map[string]string{
		"SANDBOX_DEFAULT_MEMORY_LIMIT": "`128m`",
		"SANDBOX_MAX_MEMORY_LIMIT":     "`4g`",
		"SANDBOX_TOOLS_MAX_RESULT":     "`256k`",
		"SANDBOX_SNAPSHOT_TTL":         "`7d`",
		"SANDBOX_ENV_BUILD_TIMEOUT":    "`30m`",
		"SANDBOX_TIMEOUT":              "`30`",
		"SANDBOX_REPLICA_URL":          "none",
		"SANDBOX_DEFAULT_PROFILES":     "every enabled profile",
	} {
		i := settingIndex(t, env)
		if got := shownDefault(settings[i], &d); got != want {
			t.Errorf("%s: default shown as %s, want %s", env, got, want)
		}
	}
}

func settingIndex(t *testing.T, env string) int {
	t.Helper()
	for i, s := range settings {
		if s.Env == env {
			return i
		}
	}
	t.Fatalf("no setting %s", env)
	return -1
}

// TestDocumentationLinksResolve fails on a relative link of README.md or
// docs/*.md whose file is missing, or whose #anchor names no heading of
// its page (as GitHub makes heading ids).
func TestDocumentationLinksResolve(t *testing.T) {
	root := moduleRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		for _, link := range relativeLinks(string(text)) {
			if msg := checkLink(root, page, link); msg != "" {
				t.Errorf("%s: link %q: %s", rel, link, msg)
			}
		}
	}
}

// checkLink resolves one relative link from page; "" when it holds.
func checkLink(root, page, link string) string {
	target, anchor, _ := strings.Cut(link, "#")
	file := page
	if target != "" {
		file = filepath.Join(filepath.Dir(page), filepath.FromSlash(target))
		if r, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(r, "..") {
			return "leads out of the repository"
		}
		if _, err := os.Stat(file); err != nil {
			return "no such file"
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(file, ".md") {
		return "an anchor into a file that is not Markdown"
	}
	text, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	if !headingIDs(string(text))[anchor] {
		return "no heading with that id"
	}
	return ""
}

var (
	fence      = regexp.MustCompile("(?ms)^```.*?^```")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// relativeLinks lists the targets of a page's inline links that are not
// URLs, outside code.
func relativeLinks(text string) []string {
	text = codeSpan.ReplaceAllString(fence.ReplaceAllString(text, ""), "")
	var out []string
	for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
		if !scheme.MatchString(m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// headingIDs are the anchors GitHub gives a page's headings: lower case,
// punctuation dropped, spaces as dashes, a repeat numbered.
func headingIDs(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(fence.ReplaceAllString(text, ""), "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		id := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(title))
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// moduleRoot is the directory of go.mod above the test's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}
