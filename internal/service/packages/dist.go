package packages

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/codecage/codecage/internal/policy"
)

// pruneStaleMetadata removes the .dist-info directories of the projects
// pip just installed whose version is not the one installed.
func pruneStaleMetadata(dir string, installed map[string]string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		meta := readHeaders(filepath.Join(dir, e.Name(), "METADATA"))
		want, ok := installed[policy.NormalizePackageName(meta["Name"])]
		if ok && meta["Version"] != want {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// Installed reads the distributions in a package directory.
func Installed(dir string) map[string]InstalledPackage {
	out := map[string]InstalledPackage{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() || !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		info := filepath.Join(dir, e.Name())
		meta := readHeaders(filepath.Join(info, "METADATA"))
		if meta["Name"] == "" {
			continue
		}
		p := InstalledPackage{Name: meta["Name"], Version: meta["Version"], Modules: topLevel(info)}
		out[policy.NormalizePackageName(p.Name)] = p
	}
	return out
}

func readHeaders(path string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break // the body starts
		}
		if k, v, ok := strings.Cut(line, ": "); ok {
			if _, seen := out[k]; !seen {
				out[k] = v
			}
		}
	}
	return out
}

// topLevel lists a distribution's importable top-level names: its
// top_level.txt, else the first parts of the paths its RECORD lists.
func topLevel(info string) []string {
	var mods []string
	add := func(m string) {
		m = strings.TrimSuffix(m, ".py")
		if i := strings.IndexByte(m, '.'); i >= 0 && strings.Contains(m[i:], "cpython") {
			m = m[:i] // an extension module's file name
		}
		if m != "" && m != "__pycache__" && !strings.HasSuffix(m, ".dist-info") && !strings.HasSuffix(m, ".data") && m != ".." && m != "bin" && !slices.Contains(mods, m) {
			mods = append(mods, m)
		}
	}
	if b, err := os.ReadFile(filepath.Join(info, "top_level.txt")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			add(strings.TrimSpace(l))
		}
		if len(mods) > 0 {
			return mods
		}
	}
	if b, err := os.ReadFile(filepath.Join(info, "RECORD")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			path, _, _ := strings.Cut(l, ",")
			first, _, _ := strings.Cut(path, "/")
			add(first)
		}
	}
	sort.Strings(mods)
	return mods
}

// removeDistribution deletes what a distribution's RECORD lists, and its
// metadata.
func removeDistribution(dir, name string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return
	}
	defer root.Close()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".dist-info") {
			continue
		}
		info := e.Name()
		if policy.NormalizePackageName(readHeaders(filepath.Join(dir, info, "METADATA"))["Name"]) != policy.NormalizePackageName(name) {
			continue
		}
		for _, m := range topLevel(filepath.Join(dir, info)) {
			_ = root.RemoveAll(m)
			_ = root.Remove(m + ".py")
		}
		_ = root.RemoveAll(info)
	}
}
