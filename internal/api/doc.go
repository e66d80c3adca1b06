// Package api is the contract every surface (REST, MCP, the E2B protocol,
// the peer protocol) shares with the service: the wire shapes of requests
// (params.go), the one door of a request's body (body.go: its size) and
// the one check of its JSON text (jsontext.go), the one owner rule
// (owner.go) and the one table from the service's error kinds to each
// transport's statuses (status.go).
//
// It imports nothing internal but the service's own types (and policy's
// size parser): the service knows nothing of the surfaces, and a surface
// reaches these rules only through here.
package api
