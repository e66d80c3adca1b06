//go:build !linux

package session

import "os"

// Elsewhere no workspace is a mount: nothing outlives a process but
// directories, which the next start need not reclaim.

func claimWorkspaces(string, string) (*os.File, error) { return nil, nil }

func releaseWorkspaces(*os.File) {}

type staleWorkspaces struct {
	Removed, Unmounts, Unowned int
	Kept                       []string
}

func reapStaleWorkspaces(string) (staleWorkspaces, error) { return staleWorkspaces{}, nil }
