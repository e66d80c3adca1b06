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
	"time"
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
	// Skipped says what the resolver left out of a data tree's needs, and
	// why: a library or loader configuration of the root that is not a
	// regular file (a FIFO would hang whoever opens it). At most
	// maxSkipped, then a count.
	Skipped []string `json:",omitempty"`
}

// maxSkipped bounds Programs.Skipped.
const maxSkipped = 20

// ResolveBudget bounds one resolution: an image's root is authored by
// whoever wrote the image, and a tree of millions of files must not keep
// a command (and its environment's others, which wait for it) for ever.
var ResolveBudget = 2 * time.Minute

// maxInterp bounds an ELF interpreter's path (the header's size is the
// file author's word).
const maxInterp = 4096

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
	r := &resolver{t: t, exec: map[string]bool{}, files: map[string]bool{}, links: map[string]string{}, seen: map[string]bool{},
		deadline: time.Now().Add(ResolveBudget), root: root}
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
		if err := r.program(p, name); err != nil {
			return nil, err
		}
	}
	if err := r.checkScripts(); err != nil {
		return nil, err
	}
	for _, d := range data {
		if err := r.dataTree(d); err != nil {
			return nil, err
		}
	}
	r.collect(p)
	return p, nil
}

// program finds the program name on ProgramSearchPath and adds it with
// what it needs; one that is not there is noted in p.Missing.
func (r *resolver) program(p *Programs, name string) error {
	if strings.ContainsRune(name, '/') || name == "" {
		return fmt.Errorf("program %q: give a name, not a path", name)
	}
	found := ""
	for _, dir := range ProgramSearchPath {
		if fi, err := r.t.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			found = filepath.Join(dir, name)
			break
		}
	}
	if found == "" {
		p.Missing = append(p.Missing, name)
		return nil
	}
	real, err := r.path(found)
	if err != nil {
		return err
	}
	r.exec[real] = true
	p.Names[name] = found
	if interp, isScript, err := r.shebang(real); err != nil || isScript {
		if err != nil {
			return fmt.Errorf("program %s: %w", name, err)
		}
		r.scripts = append(r.scripts, script{name: name, path: real, interp: interp})
		return nil
	}
	if err := r.elf(real, true); err != nil {
		return fmt.Errorf("program %s: %w", name, err)
	}
	return nil
}

// dataTree adds the data tree d, and the libraries its shared objects need.
func (r *resolver) dataTree(d string) error {
	real, err := r.path(d)
	if err != nil {
		return err
	}
	r.files[real] = true
	r.inData = true
	err = walkFiles(r.t, real, func(p string, e fs.DirEntry) error {
		if err := r.inTime(); err != nil {
			return err
		}
		if !strings.Contains(e.Name(), ".so") {
			return nil
		}
		return r.elf(p, false)
	})
	r.inData = false
	return err
}

// collect fills p with what was found, sorted: a file that is both a
// program and a library counts as a program.
func (r *resolver) collect(p *Programs) {
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
	p.Skipped = r.skipped
	if r.nSkipped > len(r.skipped) {
		p.Skipped = append(p.Skipped, fmt.Sprintf("and %d more", r.nSkipped-len(r.skipped)))
	}
}

type resolver struct {
	t           tree // where paths are looked up
	exec, files map[string]bool
	links       map[string]string
	seen        map[string]bool
	dirs        []string
	// inData: the files now looked at are a data tree's, whose
	// libraries may be left out (the one extension needing it then fails
	// to load, as it would without them); a program's may not.
	inData   bool
	skipped  []string
	nSkipped int
	deadline time.Time
	root     string
	// scripts are the programs asked for that are scripts (checkScripts).
	scripts []script
}

// skip notes what was left out, and why.
func (r *resolver) skip(why string) {
	r.nSkipped++
	if len(r.skipped) < maxSkipped {
		r.skipped = append(r.skipped, why)
	}
}

// inTime fails once the resolution's budget is spent.
func (r *resolver) inTime() error {
	if time.Now().After(r.deadline) {
		where := "the host's root"
		if r.root != "" {
			where = "root " + r.root
		}
		return fmt.Errorf("resolving the programs of %s took over %s", where, ResolveBudget)
	}
	return nil
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
// A file that is not ELF is data: fine unless it was to be a program (a
// script is found before: programs_script.go).
func (r *resolver) elf(real string, program bool) error {
	if r.seen[real] {
		return nil
	}
	r.seen[real] = true
	if err := r.inTime(); err != nil {
		return err
	}
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
	if err := r.interpreter(real, f); err != nil {
		return err
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return err
	}
	runpath, _ := f.DynString(elf.DT_RUNPATH)
	rpath, _ := f.DynString(elf.DT_RPATH)
	for _, lib := range needed {
		if err := r.library(real, lib, append(rpath, runpath...)); err != nil {
			return err
		}
	}
	return nil
}

// interpreter adds the ELF interpreter (the dynamic loader) f names, if
// any, as a program.
func (r *resolver) interpreter(real string, f *elf.File) error {
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			if prog.Filesz > maxInterp {
				return fmt.Errorf("%s: its ELF interpreter's path is %d bytes long", real, prog.Filesz)
			}
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
	return nil
}

// library adds lib, which the ELF file at real needs, and what it needs
// in turn; runPaths are real's own library directories.
func (r *resolver) library(real, lib string, runPaths []string) error {
	found, special := "", ""
	for _, dir := range r.searchDirs(real, runPaths) {
		fi, err := r.t.Stat(filepath.Join(dir, lib))
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			// Not a library (the loader would skip a directory; a
			// FIFO would hang whoever opens it): look further.
			if special == "" {
				special = fmt.Sprintf("%s is %s", filepath.Join(dir, lib), fileKind(fi.Mode()))
			}
			continue
		}
		found = filepath.Join(dir, lib)
		break
	}
	if found == "" && special != "" {
		why := fmt.Sprintf("%s needs %s, and %s, not a regular file", real, lib, special)
		if !r.inData {
			return errors.New(why)
		}
		r.skip(why + "; left out")
		return nil
	}
	if found == "" {
		return fmt.Errorf("%s needs %s, found in no library directory", real, lib)
	}
	libReal, err := r.path(found)
	if err != nil {
		return err
	}
	r.files[libReal] = true
	return r.elf(libReal, false)
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
		r.dirs = systemLibDirs(r.t, r.skip)
	}
	return append(out, r.dirs...)
}

// systemLibDirs are the loader's directories in t: /etc/ld.so.conf.d's
// and the default ones; a configuration file that does not open as a
// regular file is left out, said to skip.
func systemLibDirs(t tree, skip func(string)) []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "386": "i386-linux-gnu"}[runtime.GOARCH]
	dirs := []string{"/usr/local/lib"}
	confs, _ := t.ReadDir("/etc/ld.so.conf.d")
	for _, c := range confs {
		if !strings.HasSuffix(c.Name(), ".conf") {
			continue
		}
		f, err := t.Open(filepath.Join("/etc/ld.so.conf.d", c.Name()))
		if err != nil {
			if errors.Is(err, ErrNotRegular) {
				skip(fmt.Sprintf("/etc/ld.so.conf.d/%s: %v; left out", c.Name(), errors.Unwrap(err)))
			}
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
