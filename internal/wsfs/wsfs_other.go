//go:build !linux

package wsfs

import (
	"context"
	"errors"
	"io"
	"os"
)

// Root is an open workspace; the file API needs Linux (openat2).
type Root struct{}

// Open is unsupported outside Linux.
func Open(string) (*Root, error) { return nil, errors.ErrUnsupported }

func (*Root) Close() error                                   { return nil }
func (*Root) OpenFile(string, int, uint32) (*os.File, error) { return nil, errors.ErrUnsupported }
func (*Root) Lstat(string) (Entry, error)                    { return Entry{}, errors.ErrUnsupported }
func (*Root) MkdirAll(string, uint32, int) (bool, error)     { return false, errors.ErrUnsupported }
func (*Root) Rename(string, string) error                    { return errors.ErrUnsupported }
func (*Root) RemoveAll(context.Context, string) error        { return errors.ErrUnsupported }
func (*Root) List(context.Context, string, ListLimits) (Listing, error) {
	return Listing{}, errors.ErrUnsupported
}
func (*Root) Usage(context.Context, int, int) (int64, error) { return 0, errors.ErrUnsupported }
func (*Root) Space() (int64, int64, error)                   { return 0, 0, errors.ErrUnsupported }
func (*Root) CreateTemp(string, string, uint32) (*os.File, string, error) {
	return nil, "", errors.ErrUnsupported
}
func (*Root) Remove(string) error            { return errors.ErrUnsupported }
func (*Root) RemoveEmptyDir(string) error    { return errors.ErrUnsupported }
func (*Root) Resolve(string) (string, error) { return "", errors.ErrUnsupported }
func (*Root) FirstLink(string) (string, string, error) {
	return "", "", errors.ErrUnsupported
}
func (*Root) Metadata(string, MetaLimits) (map[string]string, error) {
	return nil, errors.ErrUnsupported
}
func (*Root) SetMetadata(string, map[string]string) error { return errors.ErrUnsupported }

// SetMetadataFD is unsupported outside Linux.
func SetMetadataFD(int, map[string]string) error { return errors.ErrUnsupported }

// Archive is unsupported outside Linux.
func Archive(context.Context, string, io.Writer, ArchiveLimits) (ArchiveReport, error) {
	return ArchiveReport{}, errors.ErrUnsupported
}

// Unpack is unsupported outside Linux.
func Unpack(context.Context, string, io.Reader, int, ArchiveLimits) error {
	return errors.ErrUnsupported
}
