package jail

// The sandbox's /etc: made anew at each start from what the
// configuration names, or, for a machine that keeps root's changes, an
// overlay over it (etcoverlay_linux.go). Moved out of rootfs_linux.go,
// which had passed 600 lines.

import (
	"fmt"
	"os"
	"path/filepath"
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
	if cfg.RootInside {
		// Root is someone here: a home of its own (kept in a machine's
		// own root; one the code made is left as it is).
		if err := os.Mkdir(newRoot+"/root", 0o700); err == nil {
			if err := os.Lchown(newRoot+"/root", 0, 0); err != nil {
				return fmt.Errorf("root's home: %w", err)
			}
		} else if !os.IsExist(err) {
			return fmt.Errorf("root's home: %w", err)
		}
	}
	passwd, group := Accounts(cfg.Home, SandboxUID, cfg.RootInside)
	files := map[string]string{
		"passwd":        passwd,
		"group":         group,
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
