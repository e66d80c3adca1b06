//go:build !linux

package fleet

import (
	"context"
	"errors"
	"io"

	"github.com/codecage/codecage/internal/jail"
	"github.com/codecage/codecage/internal/runtime"
)

// zygote needs Linux; elsewhere no class ever uses one.
type zygote struct{}

func newZygote(string, jail.Spec, int) *zygote { return &zygote{} }

func (z *zygote) fork(context.Context, jail.Limits, bool, io.Writer, io.Writer) (Box, error) {
	return nil, errors.New("zygotes need Linux")
}

func (z *zygote) close() {}

// cellBox is never made off Linux.
type cellBox struct{ Box }

func (c *cellBox) run(runtime.Request, runtime.ToolHandler) (*runtime.Reply, jail.Exit) {
	return nil, jail.Exit{}
}
