package wsfs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codecage/codecage/internal/wsfs"
)

// A machine with root inside owns files of its block of ids (root's, the
// users it added): with Owners, an archive keeps them as offsets from the
// directory owner's id, and an unpack with the window gives them to the
// same offsets from its uid (another block's); an owner outside the
// window (the host's root) and an unpack without it give everything to
// the uid. A forged record past the window is the uid's too.
func TestArchiveKeepsOwnersOfABlock(t *testing.T) {
	const user = 1_500_101_000 // the user's id in a block from 1_500_100_000
	win := wsfs.OwnerWindow{Min: -1000, Max: 24}
	src := scratch(t)
	must(t, os.Chown(src, user, user))
	files := map[string][2]int{"root-file": {user - 1000, user - 1000}, "alice-dir": {user + 1, user + 1},
		"mixed": {user - 1000, user}, "host-root": {0, 0}, "mine": {user, user}}
	for name, ids := range files {
		p := filepath.Join(src, name)
		if name == "alice-dir" {
			must(t, os.Mkdir(p, 0o755))
		} else {
			must(t, os.WriteFile(p, []byte(name), 0o644))
		}
		must(t, os.Lchown(p, ids[0], ids[1]))
	}
	must(t, os.Symlink("mine", filepath.Join(src, "root-link")))
	must(t, os.Lchown(filepath.Join(src, "root-link"), user-1000, user-1000))
	files["root-link"] = [2]int{user - 1000, user - 1000}

	lim := roomy
	lim.Owners = win
	var buf bytes.Buffer
	_, err := wsfs.Archive(context.Background(), src, &buf, lim)
	must(t, err)

	const other = 1_500_201_000 // the same user of another block
	dst := scratch(t)
	must(t, wsfs.Unpack(context.Background(), dst, bytes.NewReader(buf.Bytes()), other, lim))
	want := map[string][2]int{"root-file": {other - 1000, other - 1000}, "alice-dir": {other + 1, other + 1},
		"mixed": {other - 1000, other}, "host-root": {other, other}, "mine": {other, other}, "root-link": {other - 1000, other - 1000}}
	checkOwners(t, dst, want, "with the window")

	dst = scratch(t)
	must(t, wsfs.Unpack(context.Background(), dst, bytes.NewReader(buf.Bytes()), other, roomy))
	for name := range want {
		want[name] = [2]int{other, other}
	}
	checkOwners(t, dst, want, "without the window")

	forged := hostile(t, &tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, PAXRecords: map[string]string{"CODECAGE.owner": "-1500201000:5000"}})
	dst = scratch(t)
	must(t, wsfs.Unpack(context.Background(), dst, bytes.NewReader(forged), other, lim))
	checkOwners(t, dst, map[string][2]int{"f": {other, other}}, "a forged record")
}

func checkOwners(t *testing.T, dir string, want map[string][2]int, when string) {
	t.Helper()
	for name, ids := range want {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
			t.Errorf("%s: %s: %v", when, name, err)
			continue
		}
		if int(st.Uid) != ids[0] || int(st.Gid) != ids[1] {
			t.Errorf("%s: %s is %d:%d, want %d:%d", when, name, st.Uid, st.Gid, ids[0], ids[1])
		}
	}
}
