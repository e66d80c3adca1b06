package jail

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// A file moves and links into another directory of its tree (apt, git
// and most installers do); across trees of different rights or mounts it
// does not. Judged from the host's workspace.
func TestRenameIntoAnotherDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	code := `import os, errno
os.makedirs("a/partial"); os.makedirs("b")
open("a/partial/f", "w").write("moved")
os.rename("a/partial/f", "b/f")
os.link("b/f", "a/g")
open("/tmp/t", "w").write("t")
for src, dst in (("/tmp/t", "t"), ("/usr/bin/python3", "py"), ("/etc/passwd", "pw")):
    try:
        os.rename(src, dst)
        print("moved", src)
    except OSError as e:
        print(src, errno.errorcode[e.errno])`
	exit, out, errOut := startAndWait(t, Spec{Argv: python(code), Workspace: dir, Home: "/home/user"})
	if exit.ExitCode != 0 {
		t.Fatalf("exit %+v out %q err %q", exit, out, errOut)
	}
	if out != "/tmp/t EXDEV\n/usr/bin/python3 EXDEV\n/etc/passwd EXDEV\n" {
		t.Fatalf("renames across trees: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "b/f")); err != nil || string(b) != "moved" {
		t.Fatalf("b/f on the host: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "a/partial/f")); !os.IsNotExist(err) {
		t.Fatalf("a/partial/f is still there: %v", err)
	}
	var a, b syscall.Stat_t
	if syscall.Stat(filepath.Join(dir, "a/g"), &a) != nil || syscall.Stat(filepath.Join(dir, "b/f"), &b) != nil || a.Ino != b.Ino {
		t.Fatal("a/g is not a link of b/f on the host")
	}
}
