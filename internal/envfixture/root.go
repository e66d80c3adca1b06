package envfixture

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Marker is a file every fixture root holds and the host does not.
const Marker = "/etc/codecage-fixture-root"

// rootPrograms are the programs of a minimal Python root, by name in /usr/bin.
var rootPrograms = []string{"python3", "env", "sh", "ls", "cat", "id"}

// libDirs are where the host's loader finds libraries (Debian's multiarch
// layout first).
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
	"/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// MinimalPythonRoot builds at dst (which must not exist) a root that is not
// the host's: a merged /usr (bin, lib, lib64 are links into usr) holding
// the host's python3, its standard library without dist-packages or
// site-packages, env, sh, ls, cat and id, the libraries they load, a
// loader cache and Marker. Files are copies of the host's (fresh inodes).
func MinimalPythonRoot(dst string) error { return PythonRootWith(dst, nil) }

// PythonRootWith is MinimalPythonRoot with the host's programs named in
// more too, by name (placed in /usr/bin) or by absolute path (placed
// there); one the host lacks is left out: a root whose shell tools
// are the image's copies, for a suite that runs commands there.
func PythonRootWith(dst string, more []string) error {
	b, err := newBuilder(dst)
	if err != nil {
		return err
	}
	for _, l := range [][2]string{{"bin", "usr/bin"}, {"sbin", "usr/sbin"}, {"lib", "usr/lib"}, {"lib64", "usr/lib64"}} {
		if err := b.mkdir("usr/" + strings.TrimPrefix(l[1], "usr/")); err != nil {
			return err
		}
		if err := os.Symlink(l[1], filepath.Join(dst, l[0])); err != nil {
			return err
		}
	}
	for _, name := range rootPrograms {
		if err := b.program("/usr/bin/"+name, "usr/bin/"+name); err != nil {
			return err
		}
	}
	placed := slices.Clone(rootPrograms)
	for _, name := range more {
		if slices.Contains(placed, name) {
			continue
		}
		placed = append(placed, name)
		if filepath.IsAbs(name) { // a program outside bin, at its host path
			if _, err := os.Stat(name); err == nil {
				if err := b.program(name, strings.TrimPrefix(filepath.Clean(name), "/")); err != nil {
					return err
				}
			}
			continue
		}
		if strings.ContainsRune(name, '/') {
			continue
		}
		host := ""
		for _, dir := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
			if fi, err := os.Stat(dir + "/" + name); err == nil && fi.Mode().IsRegular() {
				host = dir + "/" + name
				break
			}
		}
		if host == "" {
			continue
		}
		if err := b.program(host, "usr/bin/"+name); err != nil {
			return err
		}
	}
	stdlib, err := hostStdlib()
	if err != nil {
		return err
	}
	if err := b.tree(stdlib, strings.TrimPrefix(stdlib, "/")); err != nil {
		return err
	}
	// Debian's package directories, empty: an image's Python has them.
	for _, dir := range []string{"usr/lib/python3/dist-packages", "usr/local/lib/" + filepath.Base(stdlib) + "/dist-packages"} {
		if err := b.mkdir(dir); err != nil {
			return err
		}
	}
	return b.finish()
}

// builder copies host files into a root and gathers their libraries.
type builder struct {
	dst  string
	usr  string          // "usr/" for a merged /usr, where libraries go; else ""
	libs map[string]bool // host library paths already placed
}

func newBuilder(dst string) (*builder, error) {
	if !filepath.IsAbs(dst) {
		return nil, fmt.Errorf("envfixture: %q is not absolute", dst)
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return nil, err
	}
	return &builder{dst: dst, usr: "usr/", libs: map[string]bool{}}, nil
}

func (b *builder) mkdir(rel string) error { return os.MkdirAll(filepath.Join(b.dst, rel), 0o755) }

// program places the host's program at rel and what it loads.
func (b *builder) program(host, rel string) error {
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return err
	}
	// A link to a file beside it (python3 -> python3.11) stays a link,
	// as an image has it.
	if name := filepath.Base(real); filepath.Dir(real) == filepath.Dir(host) && name != filepath.Base(host) {
		target := filepath.Join(filepath.Dir(rel), name)
		if _, err := os.Lstat(filepath.Join(b.dst, target)); os.IsNotExist(err) {
			if err := b.file(real, target); err != nil {
				return err
			}
		}
		if err := os.Symlink(name, filepath.Join(b.dst, rel)); err != nil {
			return err
		}
		return b.needs(real, true)
	}
	if err := b.file(real, rel); err != nil {
		return err
	}
	return b.needs(real, true)
}

// needs places the interpreter and libraries of the ELF file at host.
// Libraries are placed in the directory the host's loader found them in
// (under usr/ on a merged /usr), by the name the loader looks for. Missing ones are a program's error only.
func (b *builder) needs(host string, program bool) error {
	f, err := elf.Open(host)
	if err != nil {
		if program {
			return err
		}
		return nil
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		buf := make([]byte, p.Filesz)
		if _, err := p.ReadAt(buf, 0); err != nil {
			return err
		}
		interp := strings.TrimRight(string(buf), "\x00")
		if err := b.lib(interp, b.usr+strings.TrimPrefix(strings.TrimPrefix(interp, "/usr"), "/")); err != nil {
			return err
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	for _, name := range needed {
		found := ""
		for _, d := range libDirs {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				found = filepath.Join(d, name)
				break
			}
		}
		if found == "" {
			if program {
				return fmt.Errorf("envfixture: %s needs %s, found nowhere", host, name)
			}
			continue
		}
		dir := strings.TrimPrefix(strings.TrimPrefix(filepath.Dir(found), "/usr"), "/")
		if err := b.lib(found, b.usr+dir+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

// lib places the library host at rel, once, and what it loads.
func (b *builder) lib(host, rel string) error {
	if b.libs[rel] {
		return nil
	}
	b.libs[rel] = true
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return err
	}
	if err := b.file(real, rel); err != nil {
		return err
	}
	return b.needs(real, false)
}

// tree places the host directory dir at rel, without dist-packages or
// site-packages (a minimal image has no Debian Python packages), and the
// libraries of its extension modules.
func (b *builder) tree(dir, rel string) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == "dist-packages" || e.Name() == "site-packages") {
			return filepath.SkipDir
		}
		to := filepath.Join(rel, strings.TrimPrefix(p, dir))
		switch {
		case e.IsDir():
			return b.mkdir(to)
		case e.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, filepath.Join(b.dst, to))
		case e.Type().IsRegular():
			if err := b.file(p, to); err != nil {
				return err
			}
			if strings.HasSuffix(e.Name(), ".so") {
				return b.needs(p, false)
			}
		}
		return nil
	})
}

// file places a copy of the host's regular file at rel.
func (b *builder) file(host, rel string) error {
	to := filepath.Join(b.dst, rel)
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	// Always a copy, never a hard link: whatever is later done to the
	// root (a store's commit strips set-user-ID bits and makes files the
	// operator's) must never reach the host's own files.
	return copyFile(host, to, 0)
}

// copyFile copies host to to, with host's permission bits, or mode when
// it is not zero (a fresh inode: the host's file is never changed).
func copyFile(host, to string, mode os.FileMode) error {
	in, err := os.Open(host)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if mode == 0 {
		mode = fi.Mode().Perm()
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode&0o777)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(to, mode) // past the umask, setuid included
}

// finish writes the loader's configuration and cache and Marker.
func (b *builder) finish() error {
	if err := b.mkdir("etc/ld.so.conf.d"); err != nil {
		return err
	}
	conf := "/usr/lib/x86_64-linux-gnu\n/usr/lib/aarch64-linux-gnu\n"
	if err := os.WriteFile(filepath.Join(b.dst, "etc/ld.so.conf.d/multiarch.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dst, "etc/ld.so.conf"), []byte("include /etc/ld.so.conf.d/*.conf\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dst, "etc/os-release"), []byte("ID=codecage-fixture\nNAME=\"codecage fixture\"\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.dst, Marker), []byte("a codecage test root\n"), 0o644); err != nil {
		return err
	}
	if err := b.ldCache(); err != nil {
		return err
	}
	return os.Chmod(b.dst, 0o755)
}

// ldCache generates the root's own loader cache (ldconfig -r, which needs
// root to chroot), else copies the host's: a cache naming a library the
// root lacks only sends the loader to its default directories.
func (b *builder) ldCache() error {
	if os.Geteuid() == 0 {
		if ldconfig, err := exec.LookPath("/sbin/ldconfig"); err == nil {
			if out, err := exec.Command(ldconfig, "-X", "-r", b.dst).CombinedOutput(); err != nil {
				return fmt.Errorf("envfixture: ldconfig -r: %v: %s", err, out)
			}
			return nil
		}
	}
	return copyFile("/etc/ld.so.cache", filepath.Join(b.dst, "etc/ld.so.cache"), 0o644)
}

// hostStdlib is the standard library of the host's python3 (/usr/lib/python3.X).
func hostStdlib() (string, error) {
	real, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		return "", err
	}
	dir := "/usr/lib/" + filepath.Base(real) // python3.11
	if _, err := os.Stat(filepath.Join(dir, "os.py")); err != nil {
		return "", errors.New("envfixture: no standard library at " + dir)
	}
	return dir, nil
}

// Hostile roots, each a small shell root (real bin, lib and lib64
// directories, no /usr: sh, cat, id, ls and env run) with one twist an
// image's author could write.
const (
	// UsrToHost: usr is a symlink to "/".
	UsrToHost = "usr-to-host"
	// UsrUp: usr is a symlink climbing out, to "../../etc".
	UsrUp = "usr-up"
	// ProcRoot: sbin, lib32 and libx32 are symlinks to /proc/self/root.
	ProcRoot = "proc-root"
	// Lib64Proc: lib64 (the loader's directory) links to /proc/self/root.
	Lib64Proc = "lib64-proc"
	// AlternativesToEtc: etc/alternatives is a symlink to /etc.
	AlternativesToEtc = "alternatives-to-etc"
	// CacheToShadow: etc/ld.so.cache links to /etc/shadow, etc/ssl to
	// /etc/ssl and etc/os-release to /etc/os-release.
	CacheToShadow = "cache-to-shadow"
	// EtcUp: etc itself is a symlink to "../../../etc".
	EtcUp = "etc-up"
	// Setuid: bin/id and bin/cat are setuid-root copies.
	Setuid = "setuid"
	// WritableDir: bin is writable by everyone.
	WritableDir = "writable-dir"
	// WritableRoot: the root directory itself is writable by everyone.
	WritableRoot = "writable-root"
)

// HostileKinds lists every kind HostileRoot builds.
var HostileKinds = []string{UsrToHost, UsrUp, ProcRoot, Lib64Proc, AlternativesToEtc, CacheToShadow, EtcUp, Setuid, WritableDir, WritableRoot}

// HostileRoot builds at dst (which must not exist) a shell root with the
// twist kind names.
func HostileRoot(dst, kind string) error {
	b, err := newBuilder(dst)
	if err != nil {
		return err
	}
	b.usr = ""
	for _, name := range []string{"sh", "cat", "id", "ls", "env"} {
		if err := b.program("/usr/bin/"+name, "bin/"+name); err != nil {
			return err
		}
	}
	if err := b.finish(); err != nil {
		return err
	}
	link := func(target, rel string) error {
		p := filepath.Join(dst, rel)
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		return os.Symlink(target, p)
	}
	switch kind {
	case UsrToHost:
		return link("/", "usr")
	case UsrUp:
		return link("../../etc", "usr")
	case ProcRoot:
		for _, d := range []string{"sbin", "lib32", "libx32"} {
			if err := link("/proc/self/root", d); err != nil {
				return err
			}
		}
		return nil
	case Lib64Proc:
		return link("/proc/self/root", "lib64")
	case AlternativesToEtc:
		return link("/etc", "etc/alternatives")
	case CacheToShadow:
		for _, l := range [][2]string{{"/etc/shadow", "etc/ld.so.cache"}, {"/etc/ssl", "etc/ssl"}, {"/etc/os-release", "etc/os-release"}} {
			if err := link(l[0], l[1]); err != nil {
				return err
			}
		}
		return nil
	case EtcUp:
		return link("../../../etc", "etc")
	case Setuid:
		for _, name := range []string{"id", "cat"} {
			p := filepath.Join(dst, "bin", name)
			// A fresh copy: chmod on a hard link would change the host's file.
			if err := os.Remove(p); err != nil {
				return err
			}
			if err := copyFile("/usr/bin/"+name, p, os.ModeSetuid|0o755); err != nil {
				return err
			}
		}
		return nil
	case WritableDir:
		return os.Chmod(filepath.Join(dst, "bin"), 0o777)
	case WritableRoot:
		return os.Chmod(dst, 0o777)
	}
	return fmt.Errorf("envfixture: no hostile root %q", kind)
}
