package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The binary scripts/build.sh makes (setup.sh's) is static: no ELF
// interpreter, no shared libraries. It still checks the host (doctor) and
// runs code in the jail, which re-executes this same file as its init.
func TestBuildIsStatic(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "codecage")
	build := exec.Command("../../scripts/build.sh", bin)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %v: the binary is dynamically linked", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("needs shared libraries %v", libs)
	}

	env := append(os.Environ(), "SANDBOX_STATE_DIR="+t.TempDir())
	doctor := exec.Command(bin, "doctor")
	doctor.Env = env
	out, err := doctor.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok    seccomp") || !strings.Contains(string(out), "ok    user namespaces") {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	run := exec.Command(bin, "run", "-c", "import sys\nprint(6 * 7, sys.maxsize > 0)")
	run.Env = env
	out, err = run.CombinedOutput()
	if err != nil || string(out) != "42 True\n" {
		t.Fatalf("run: %v\n%s", err, out)
	}
}
