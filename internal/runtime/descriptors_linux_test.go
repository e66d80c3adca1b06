package runtime

import (
	"os"
	"testing"
)

// The code starts with 0-2 and the channel alone, whatever the harness
// inherited beyond them: here a directory descriptor of / at fd 4, as a
// backend's runtime could leave one.
func TestHarnessClosesInheritedDescriptors(t *testing.T) {
	root, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ch := startHarnessWith(t, root)
	code := `import os, fcntl
def held(fd):
    try:
        fcntl.fcntl(fd, fcntl.F_GETFD)
        return True
    except OSError:
        return False  # the listing's own descriptor, closed since
[fd for fd in sorted(map(int, os.listdir("/proc/self/fd"))) if held(fd)]`
	if got := string(run(t, ch, Request{Code: code}).Result); got != "[0,1,2,3]" {
		t.Fatalf("the code starts with descriptors %s, want [0, 1, 2, 3]", got)
	}
}
