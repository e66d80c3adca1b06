package jail

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
)

// Programs is a minimal root for a sandbox that may run only some programs
// (Spec.Programs): instead of the host's system directories, the root holds
// these programs, the files they load, and the symlinks that lead to them,
// and Landlock lets nothing else execute. Since anything readable could be
// run through the dynamic loader, nothing else that is a program is there.
type Programs struct {
	// Exec are the real paths of the programs that may run, the dynamic
	// loader among them.
	Exec []string
	// Files are read-only paths the programs need (libraries, data); they
	// may be read but not executed.
	Files []string
	// Links are symlinks to recreate, path to target as on the host.
	Links map[string]string
	// Names maps each program name asked for to the path it runs as.
	Names map[string]string
	// Missing lists the names found nowhere on the search path.
	Missing []string
	// Aliases maps a name added by Alias to the program it runs.
	Aliases map[string]string
	// Root is the environment root the programs were found in
	// (ResolveProgramsIn), "" for the host's; every path above is as the
	// sandbox sees it. A sandbox's Spec.Root must be the same.
	Root string `json:",omitempty"`
}

// Alias makes name run the program of (a symlink beside it) when no
// program of that name was asked for and found: E2B's images have python
// as python3, and Debian's python3 package has no python. It reports
// whether name now runs of; nothing new is executable, the link leads to a
// program already there.
func (p *Programs) Alias(name, of string) bool {
	target, ok := p.Names[of]
	if _, taken := p.Names[name]; taken || !ok || strings.ContainsRune(name, '/') || name == "" {
		return false
	}
	// The link goes in the real directory: one reached through a symlink
	// (/bin on a merged /usr) would be followed when the root is built.
	t, err := openTree(p.Root)
	if err != nil {
		return false
	}
	defer t.Close()
	dir, err := (&resolver{t: t, links: map[string]string{}}).path(filepath.Dir(target))
	if err != nil {
		return false
	}
	link := filepath.Join(dir, name)
	if _, exists := p.Links[link]; exists {
		return false
	}
	if p.Links == nil {
		p.Links = map[string]string{}
	}
	if p.Aliases == nil {
		p.Aliases = map[string]string{}
	}
	rel := filepath.Base(target)
	if filepath.Dir(target) != dir {
		rel = target
	}
	p.Links[link] = rel
	p.Names[name] = link
	p.Aliases[name] = of
	p.Missing = slices.DeleteFunc(p.Missing, func(m string) bool { return m == name })
	return true
}

// hostSystemDirs are bound read-only when they are real directories on the
// host; a symlink (merged /usr) is recreated as the same symlink instead.
var hostSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// hostEtcDirs are bound read-only: Debian resolves shared libraries such as
// BLAS through /etc/alternatives symlinks.
var hostEtcDirs = []string{"/etc/alternatives"}

// SystemTree lists the host directories an interpreter's sandbox shows,
// read-only, at the same paths (a symlink among them is shown as that
// symlink): what a file API may read of the sandbox's system tree.
func SystemTree() []string {
	return append(append([]string(nil), hostSystemDirs...), hostEtcDirs...)
}

// ProgramSearchPath is where ResolvePrograms looks for program names.
var ProgramSearchPath = []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"}

// ResolvePrograms finds each program name on ProgramSearchPath and gathers
// what it needs: its ELF interpreter and shared libraries (recursively) and
// the symlinks on the way. data are extra trees the programs read (a
// Python's standard library); the ELF files inside them contribute their
// libraries too, but none of them may be a program.
func ResolvePrograms(names []string, data []string) (*Programs, error) {
	return ResolveProgramsIn("", names, data)
}

// ResolveProgramsIn is ResolvePrograms in an environment's root (Spec.Root;
// "" for the host's): the programs, their loader, libraries and data are
// looked for in root, every symlink resolved as the sandbox will resolve
// it (an absolute target from the root, ".." stopping at it), never
// leading out of root, and every path returned is as the sandbox sees it.
func ResolveProgramsIn(root string, names []string, data []string) (*Programs, error) {
	t, err := openTree(root)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	r := &resolver{t: t, exec: map[string]bool{}, files: map[string]bool{}, links: map[string]string{}, seen: map[string]bool{}}
	p := &Programs{Names: map[string]string{}, Root: root}
	// A merged /usr: /bin, /lib and the like stay the links they are, so
	// that /bin/sh and the loader's paths work as on the host.
	for _, d := range hostSystemDirs {
		if fi, err := t.Lstat(d); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if _, err := r.path(d); err != nil {
				return nil, err
			}
		}
	}
	for _, name := range names {
		if strings.ContainsRune(name, '/') || name == "" {
			return nil, fmt.Errorf("program %q: give a name, not a path", name)
		}
		found := ""
		for _, dir := range ProgramSearchPath {
			if fi, err := t.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				found = filepath.Join(dir, name)
				break
			}
		}
		if found == "" {
			p.Missing = append(p.Missing, name)
			continue
		}
		real, err := r.path(found)
		if err != nil {
			return nil, err
		}
		r.exec[real] = true
		p.Names[name] = found
		if err := r.elf(real, true); err != nil {
			return nil, fmt.Errorf("program %s: %w", name, err)
		}
	}
	for _, d := range data {
		real, err := r.path(d)
		if err != nil {
			return nil, err
		}
		r.files[real] = true
		err = walkFiles(t, real, func(p string, e fs.DirEntry) error {
			if !strings.Contains(e.Name(), ".so") {
				return nil
			}
			return r.elf(p, false)
		})
		if err != nil {
			return nil, err
		}
	}
	for f := range r.exec {
		delete(r.files, f)
		p.Exec = append(p.Exec, f)
	}
	for f := range r.files {
		p.Files = append(p.Files, f)
	}
	sort.Strings(p.Exec)
	sort.Strings(p.Files)
	p.Links = r.links
	return p, nil
}

type resolver struct {
	t           tree // where paths are looked up
	exec, files map[string]bool
	links       map[string]string
	seen        map[string]bool
	dirs        []string
}

// path returns the real path of p, recording every symlink on the way.
func (r *resolver) path(p string) (string, error) {
	for range 40 {
		parts := strings.Split(filepath.Clean(p), "/")
		cur := "/"
		resolved := true
		for i, part := range parts {
			if part == "" {
				continue
			}
			next := filepath.Join(cur, part)
			fi, err := r.t.Lstat(next)
			if err != nil {
				return "", err
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				target, err := r.t.Readlink(next)
				if err != nil {
					return "", err
				}
				r.links[next] = target
				if !filepath.IsAbs(target) {
					target = filepath.Join(cur, target)
				}
				p = filepath.Join(append([]string{target}, parts[i+1:]...)...)
				resolved = false
				break
			}
			cur = next
		}
		if resolved {
			return cur, nil
		}
	}
	return "", fmt.Errorf("%s: too many symlinks", p)
}

// elf adds the interpreter and the libraries of the ELF file at real.
// A file that is not ELF is data: fine unless it was to be a program
// (a script's interpreter would be needed too, and is not followed).
func (r *resolver) elf(real string, program bool) error {
	if r.seen[real] {
		return nil
	}
	r.seen[real] = true
	file, err := r.t.Open(real)
	if err != nil {
		return err
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		var fe *elf.FormatError
		if program && errors.As(err, &fe) {
			return fmt.Errorf("%s is not an ELF program (scripts are not supported)", real)
		}
		if errors.As(err, &fe) {
			return nil
		}
		return err
	}
	defer f.Close()
	if !program && f.Type == elf.ET_EXEC {
		return fmt.Errorf("%s is a program inside a data tree; it could be run through the loader", real)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return err
			}
			interp, err := r.path(strings.TrimRight(string(b), "\x00"))
			if err != nil {
				return fmt.Errorf("interpreter of %s: %w", real, err)
			}
			r.exec[interp] = true
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	rpath, _ := f.DynString(elf.DT_RPATH)
	for _, lib := range needed {
		found := ""
		for _, dir := range r.searchDirs(real, append(rpath, runpath...)) {
			if _, err := r.t.Stat(filepath.Join(dir, lib)); err == nil {
				found = filepath.Join(dir, lib)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%s needs %s, found in no library directory", real, lib)
		}
		libReal, err := r.path(found)
		if err != nil {
			return err
		}
		r.files[libReal] = true
		if err := r.elf(libReal, false); err != nil {
			return err
		}
	}
	return nil
}

// searchDirs are the library directories, in the dynamic loader's order
// for this file: its run paths, then the system's.
func (r *resolver) searchDirs(file string, paths []string) []string {
	var out []string
	for _, p := range paths {
		for _, d := range strings.Split(p, ":") {
			out = append(out, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(file)))
		}
	}
	if r.dirs == nil {
		r.dirs = systemLibDirs(r.t)
	}
	return append(out, r.dirs...)
}

// systemLibDirs are the loader's directories in t: /etc/ld.so.conf.d's
// and the default ones.
func systemLibDirs(t tree) []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "386": "i386-linux-gnu"}[runtime.GOARCH]
	dirs := []string{"/usr/local/lib"}
	confs, _ := t.ReadDir("/etc/ld.so.conf.d")
	for _, c := range confs {
		if !strings.HasSuffix(c.Name(), ".conf") {
			continue
		}
		f, err := t.Open(filepath.Join("/etc/ld.so.conf.d", c.Name()))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "/") {
				dirs = append(dirs, line)
			}
		}
		f.Close()
	}
	if triplet != "" {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	return append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
}
