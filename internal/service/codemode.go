package service

import (
	"context"

	"github.com/codecage/codecage/internal/service/codemode"
)

// Code mode is a domain of its own (internal/service/codemode): the
// upstream tools a run may call, and the calls it makes. Here are its
// names as the surfaces spell them.

// EventToolCall is the event kind of one call the code made to an
// upstream tool (code mode).
const EventToolCall = codemode.EventToolCall

// Code mode's types (codemode documents each). Aliases of types of the
// same names: the OpenAPI and MCP schemas keep their names.
type (
	CodeTool   = codemode.CodeTool
	CodeServer = codemode.CodeServer
)

// CodeTools lists the upstream tools code may call, with their Python
// signatures, and the servers' state.
func (s *Service) CodeTools(ctx context.Context) ([]CodeTool, []CodeServer, error) {
	return s.codeMode.List(ctx)
}
