package jail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sandbox for code written for a VM: the workspace at /home/user, which
// is the working directory and the user's home, and nowhere else.
func TestHomeMountsTheWorkspaceThere(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	code := `import os, pwd
me = pwd.getpwuid(os.getuid())
print(os.getcwd(), me.pw_dir, me.pw_name, os.path.exists("/workspace"))
open("note.txt", "w").write("hi")
try:
    open("/home/other.txt", "w")
except OSError as e:
    print("refused", e.errno)`
	exit, out, errOut := startAndWait(t, Spec{Argv: python(code), Workspace: dir, Home: "/home/user"})
	if exit.ExitCode != 0 {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != "/home/user /home/user user False" || !strings.HasPrefix(lines[1], "refused ") {
		t.Fatalf("out %q err %q", out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "note.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("the host workspace does not hold the file: %q %v", b, err)
	}
}

func TestCheckHomeRefusesSystemPaths(t *testing.T) {
	for _, bad := range []string{"/", "/etc", "/usr/lib", "/home", "/home/", "/home/a/b", "/home/../etc", "/home/User", "/home/1a", "relative"} {
		if CheckHome(bad) == nil {
			t.Errorf("CheckHome(%q) accepted", bad)
		}
	}
	for _, good := range []string{"", WorkspaceDir, "/home/user", "/home/a_b-2"} {
		if err := CheckHome(good); err != nil {
			t.Errorf("CheckHome(%q): %v", good, err)
		}
	}
	if _, err := Start(t.Context(), Spec{Argv: python("pass"), Home: "/etc"}); err == nil {
		t.Fatal("Start accepted a home over /etc")
	}
}
