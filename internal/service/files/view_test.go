package files

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/codecage/codecage/internal/wsfs"
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
	if _, err := wsfs.LstatIn(root, "/etc/passwd"); err == nil {
		t.Fatal("LstatIn followed the root's /etc link to the host's")
	}
	if _, err := wsfs.LstatIn(root, "/usr/lib"); err != nil {
		t.Fatalf("LstatIn /usr/lib: %v", err)
	}
}
