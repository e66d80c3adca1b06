package gvisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// removeBundle removes a sandbox's directory. runsc leaves mounts in it
// (a current one pins its gofers' empty network namespace at
// state/null-netns, and stacks a pin per racing sandbox): each is
// unmounted first, or the directory could not go and the mount would stay
// on the host.
func removeBundle(dir string) {
	// Stacked mounts need one unmount each; a bounded number of passes.
	for range 8 {
		points := mountsUnder(dir)
		if len(points) == 0 {
			break
		}
		for _, p := range points {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
	if len(mountsUnder(dir)) > 0 {
		// Never remove through a mount that stayed (a system directory
		// bound in a machine's root): leave the directory instead.
		return
	}
	_ = os.RemoveAll(dir)
}

// systemBind binds m (a read-only bind of a system directory) into the
// bundle's root on the host, recursively, read-only, nosuid and nodev:
// then it is part of the root runsc overlays with memory, not a mount of
// its own (runsc overlays no read-only mount). removeBundle unmounts it.
func systemBind(root string, m ociMount) error {
	if err := mountPoint(root, m); err != nil {
		return err
	}
	dst := filepath.Join(root, m.Destination)
	if err := unix.Mount(m.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("gvisor: bind %s: %w", m.Source, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if err := unix.MountSetattr(-1, dst, unix.AT_RECURSIVE, attr); err != nil {
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return fmt.Errorf("gvisor: bind %s read-only: %w", m.Source, err)
	}
	return nil
}

// mountsUnder lists the mount points at or below dir in this process's
// mount namespace, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space,
// \011, \012, \134).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// execBind binds a machine's workspace (src) at <dir>/workspace with
// noexec cleared, nosuid and nodev kept: the gofer maps its files for gVisor's kernel, and a
// host mount that is noexec (a workspace's tmpfs) makes every executable
// mapping of them fail, so a program built there would crash at its
// start. The bind lives in the bundle, removed with it (removeBundle).
// Where binding is refused (rootless: the workspace is a plain directory,
// without noexec), src itself serves.
func execBind(dir, src string) (string, error) {
	dst := filepath.Join(dir, "workspace")
	if err := os.Mkdir(dst, 0o700); err != nil {
		return "", fmt.Errorf("gvisor: workspace bind: %w", err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			return src, nil
		}
		return "", fmt.Errorf("gvisor: workspace bind: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Attr_clr: unix.MOUNT_ATTR_NOEXEC}
	if err := unix.MountSetattr(-1, dst, 0, attr); err != nil {
		_ = unix.Unmount(dst, unix.MNT_DETACH)
		return "", fmt.Errorf("gvisor: workspace bind: %w", err)
	}
	return dst, nil
}
