package envs

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/codecage/codecage/internal/bounded"
)

// An environment's root adds modules beyond the standard library: the
// Debian packages, the image's pip installs. The import policy lets runs
// in it import them (WithModules), as it does the operator's layer's,
// so the build records them (Env.Modules): the top-level modules of the
// package directories the harness puts on sys.path in that root (its
// _site_paths: Debian's dist-packages, else the prefix's site-packages),
// the standard library's names left out. The root's own Python lists
// them, in a sandbox started from the root, so the server itself reads
// nothing of a root an image's author made.

// maxEnvModules bounds what one environment records (a conda image has a
// few thousand); the rest are named in the build's log as left out.
const maxEnvModules = 5000

// modulesProbe prints the added modules one a line, at most
// its argument and 60 000 bytes (the probe's output is capped at 64 KiB),
// then "+N" for those left out. It runs with -I -S, as the harness does:
// no site.py, no .pth file, sys.path the standard library's alone.
const modulesProbe = `import os, sys, importlib.machinery as m
limit = int(sys.argv[1])
v = "python%d.%d" % sys.version_info[:2]
if sys.prefix == "/usr":
    dirs = ["/usr/local/lib/%s/dist-packages" % v, "/usr/lib/python3/dist-packages", "/usr/lib/%s/dist-packages" % v]
else:
    dirs = [os.path.join(sys.prefix, "lib", v, "site-packages")]
ext = tuple(m.EXTENSION_SUFFIXES)
def names(d):
    try:
        entries = os.listdir(d)
    except OSError:
        return
    for n in entries:
        if n.endswith(".py"):
            n = n[:-3]
        elif n.endswith(ext):
            n = n.split(".")[0]
        elif not os.path.isdir(os.path.join(d, n)):
            continue
        if n.isidentifier() and n.isascii() and n != "__pycache__" and len(n) <= 100:
            yield n
std = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
for d in sys.path:
    if d and d not in dirs:
        std.update(names(d))
found = set()
for d in dirs:
    found.update(n for n in names(d) if n not in std)
out, size, left = [], 0, 0
for n in sorted(found):
    if len(out) >= limit or size + len(n) + 1 > 60000:
        left += 1
        continue
    out.append(n)
    size += len(n) + 1
if left:
    out.append("+%d" % left)
print("\n".join(out))`

// topModuleName is what a recorded module may be (the probe's output is the
// image's Python's word: checked again here).
var topModuleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,99}$`)

// rootModules asks the root's Python (python, in the staged root) for the
// modules its package directories add; more counts those left out.
func (d *Envs) rootModules(ctx context.Context, root, python string) (mods []string, more int, err error) {
	out, err := d.probePython(ctx, root, "", python, "-I", "-S", "-c", modulesProbe, strconv.Itoa(maxEnvModules))
	if err != nil {
		return nil, 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "+"):
			n, err := strconv.Atoi(line[1:])
			if err != nil || n < 0 {
				return nil, 0, fmt.Errorf("unexpected output %s", bounded.Quote(bounded.String(line, 100)))
			}
			more += n
		case topModuleName.MatchString(line) && len(mods) < maxEnvModules:
			mods = append(mods, line)
		default:
			more++
		}
	}
	return mods, more, nil
}
