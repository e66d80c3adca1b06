//go:build !linux

package snapstore

import "os"

// fileStamp changes whenever a file is written: here its modification
// time and size.
type fileStamp struct{ sec, nsec, size int64 }

func stampOf(fi os.FileInfo) fileStamp {
	return fileStamp{fi.ModTime().Unix(), int64(fi.ModTime().Nanosecond()), fi.Size()}
}
