//go:build !linux

package wsfs

import "errors"

// Watcher watches a directory of a workspace; it needs Linux (inotify).
type Watcher struct{}

// Watch is unsupported outside Linux.
func (*Root) Watch(string, bool, WatchLimits) (*Watcher, error) { return nil, errors.ErrUnsupported }

func (*Watcher) Ready() <-chan struct{}      { return nil }
func (*Watcher) Take() ([]WatchEvent, error) { return nil, errors.ErrUnsupported }
func (*Watcher) Close() error                { return nil }
