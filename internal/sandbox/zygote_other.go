//go:build !linux

package sandbox

import (
	"context"
	"errors"

	"github.com/codecage/codecage/internal/jail"
)

// zygote needs Linux; elsewhere no class ever uses one.
type zygote struct{}

func newZygote(string, []string, []string, []jail.Bind, jail.Limits) *zygote { return &zygote{} }

func (z *zygote) fork(context.Context, jail.Limits, bool) (pooled, error) {
	return nil, errors.New("zygotes need Linux")
}

func (z *zygote) close() {}
