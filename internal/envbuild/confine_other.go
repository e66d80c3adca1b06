//go:build !linux

package envbuild

import (
	"context"
	"errors"
	"io"

	"github.com/codecage/codecage/internal/egress"
)

var proxyURL = "http://127.0.0.1:3128"

type confined struct {
	argv  []string
	env   []string
	dir   string
	allow *egress.Policy
	log   io.Writer
	label string
}

// run fails: the build tools' namespaces are Linux's.
func (c confined) run(ctx context.Context) error {
	return errors.New("envbuild: builds need Linux")
}
