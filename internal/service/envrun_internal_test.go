package service

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/codecage/codecage/internal/envstore"
	"github.com/codecage/codecage/internal/policy"
)

// The file view of a session from an environment shows the system tree
// of the environment's root: its directories at root+path on the host,
// its links as links (their targets looked up in the sandbox's terms),
// and nothing reached through a link of the root on the host: a root
// whose /etc is a link to the host's /etc shows no /etc/alternatives.
func TestSystemTreeInRoot(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("usr/bin", filepath.Join(root, "bin")))
	must(os.Symlink("/etc", filepath.Join(root, "etc"))) // a hostile image's
	must(os.Symlink("/", filepath.Join(root, "lib")))
	got := map[string]mount{}
	for _, d := range []string{"app", "opt/tool", "opt/codecage/site", "home/user", "srv"} {
		must(os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	must(os.Symlink("/", filepath.Join(root, "up")))
	for _, m := range systemTreeIn(root, "/home/user") {
		got[m.at] = m
	}
	// The root's own top-level directories, as the sandbox shows them.
	for _, at := range []string{"/app", "/opt/tool", "/srv"} {
		if m, ok := got[at]; !ok || m.host != filepath.Join(root, at) || m.writable {
			t.Errorf("%s: %+v (ok %v), want the root's, read-only", at, m, ok)
		}
	}
	if m := got["/up"]; m.link != "/" || m.host != "" {
		t.Errorf("/up: %+v, want the link as it is", m)
	}
	for _, at := range []string{"/opt", "/opt/codecage", "/opt/codecage/site", "/home", "/home/user"} {
		if m, ok := got[at]; ok {
			t.Errorf("%s shown from the root: %+v", at, m)
		}
	}
	if m, ok := got["/usr"]; !ok || m.host != filepath.Join(root, "usr") {
		t.Fatalf("/usr: %+v (ok %v), want the root's", m, ok)
	}
	if m := got["/bin"]; m.link != "usr/bin" || m.host != "" {
		t.Fatalf("/bin: %+v, want a link to usr/bin", m)
	}
	if m := got["/lib"]; m.link != "/" || m.host != "" {
		t.Fatalf("/lib: %+v, want the link as it is, not the host's /", m)
	}
	for at, m := range got {
		if m.host != "" && !filepath.IsAbs(m.host) || m.host != "" && m.host != filepath.Join(root, at) {
			t.Errorf("%s: shown from %s, outside the root", at, m.host)
		}
	}
	if _, ok := got["/etc/alternatives"]; ok {
		t.Fatalf("/etc/alternatives shown through the root's link to the host's /etc: %+v", got["/etc/alternatives"])
	}
	if _, err := lstatIn(root, "/etc/passwd"); err == nil {
		t.Fatal("lstatIn followed the root's /etc link to the host's")
	}
	if _, err := lstatIn(root, "/usr/lib"); err != nil {
		t.Fatalf("lstatIn /usr/lib: %v", err)
	}
}

// An environment's modules join a run's import policy (not one whose
// policy is off), and records of one content that start differently
// have classes of their own.
func TestEnvironmentPolicyAndVariant(t *testing.T) {
	e := envstore.Env{ID: "sha256:1", Modules: []string{"polars", "json"}}
	p := withEnvironment(policy.ImportPolicy{Modules: []string{"json", "math"}}, e)
	if !slices.Equal(p.Modules, []string{"json", "math", "polars"}) {
		t.Fatalf("modules %v", p.Modules)
	}
	if off := withEnvironment(policy.ImportPolicy{}, e); off.Modules != nil {
		t.Fatalf("a policy that is off got modules %v", off.Modules)
	}
	f := e
	f.Vars = map[string]string{"A": "1"}
	if envVariant(e) == envVariant(f) {
		t.Fatal("records with other variables share a class")
	}
	if envVariant(e) != envVariant(envstore.Env{ID: "sha256:1", Name: "other", Modules: e.Modules}) {
		t.Fatal("two names of one record got classes of their own")
	}
}
