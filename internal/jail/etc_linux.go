package jail

// The sandbox's /etc: made anew at each start from what the
// configuration names, or, for a machine that keeps root's changes, an
// overlay over it (etcoverlay_linux.go). Moved out of rootfs_linux.go,
// which had passed 600 lines.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

func buildEtc(cfg *initConfig) error {
	if err := os.Mkdir(newRoot+"/etc", 0o755); err != nil {
		return err
	}
	if err := fillEtc(cfg); err != nil {
		return err
	}
	if cfg.etc != nil { // a machine's own /etc (etcoverlay_linux.go)
		err := cfg.etc.mount()
		cfg.etc = nil
		return err
	}
	return nil
}

// fillEtc writes the generated /etc.
func fillEtc(cfg *initConfig) error {
	etc := newRoot + "/etc"
	uid := strconv.Itoa(SandboxUID)
	user := UserOf(cfg.Home)
	rootShell := "/usr/sbin/nologin"
	if cfg.RootInside {
		// Root is someone here: a shell, and a home of its own (kept in
		// a machine's own root; one the code made is left as it is).
		rootShell = "/bin/sh"
		if err := os.Mkdir(newRoot+"/root", 0o700); err == nil {
			if err := os.Lchown(newRoot+"/root", 0, 0); err != nil {
				return fmt.Errorf("root's home: %w", err)
			}
		} else if !os.IsExist(err) {
			return fmt.Errorf("root's home: %w", err)
		}
	}
	system, systemGroups := systemAccounts(cfg)
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:" + rootShell + "\n" + system +
			user + ":x:" + uid + ":" + uid + ":" + user + ":" + cfg.Home + ":/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group":         "root:x:0:\n" + systemGroups + user + ":x:" + uid + ":\nnogroup:x:65534:\n",
		"hosts":         "127.0.0.1\tlocalhost " + cfg.Hostname + "\n::1\tlocalhost\n",
		"hostname":      cfg.Hostname + "\n",
		"nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
		// No resolver: the sandbox has no network, and saying so makes
		// lookups fail at once instead of timing out.
		"resolv.conf": "",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if cfg.UsrTree {
		for _, d := range aptEtcDirs { // pkgskeleton_linux.go
			if err := os.MkdirAll(filepath.Join(etc, d), 0o755); err != nil {
				return err
			}
		}
	}
	if cfg.HasRoot {
		return nil // the loader's cache and the /etc trees come from the root
	}
	for _, p := range hostEtcFiles {
		b, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(newRoot+p, b, 0o644); err != nil {
			return err
		}
	}
	for _, p := range hostEtcDirs {
		if cfg.Programs != nil {
			break // the programs' own links are recreated instead
		}
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if cfg.etc != nil {
			if err := copyLinks(p, newRoot+p, maxAlternatives); err != nil {
				return err
			}
			continue
		}
		if err := bindReadOnly(p, newRoot+p); err != nil {
			return err
		}
	}
	return nil
}

// systemAccounts are the passwd and group lines of the system's own
// users. With root inside, apt fetches as _apt when it exists (as root
// it warns that it fetches unsandboxed). Debian gives it nogroup, 65534,
// which the machine's ids (0 to MachineIDs-1) do not map: a group of its
// own.
func systemAccounts(cfg *initConfig) (passwd, group string) {
	if !cfg.RootInside {
		return "", ""
	}
	return "_apt:x:42:42::/nonexistent:/usr/sbin/nologin\n", "_apt:x:42:\n"
}
