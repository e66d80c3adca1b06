package snapstore

import (
	"os"
	"syscall"
)

// fileStamp changes whenever a file is written: its change time (which
// no one but the kernel sets) and its size.
type fileStamp struct{ sec, nsec, size int64 }

func stampOf(fi os.FileInfo) fileStamp {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{fi.ModTime().Unix(), int64(fi.ModTime().Nanosecond()), fi.Size()}
	}
	return fileStamp{int64(st.Ctim.Sec), int64(st.Ctim.Nsec), fi.Size()}
}
