package upstream

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cached returns the tool list of c if it is current.
func (s *server) cached(c *conn) ([]Tool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c != nil && s.toolsConn == c && s.toolsGen == s.listGen {
		return s.tools, true
	}
	return nil, false
}

// toolList returns the server's exposed tools, listing them if the cache
// is not current (or fresh is set), reconnecting once if the connection
// turns out broken.
func (s *server) toolList(ctx context.Context, attempts int, fresh bool) ([]Tool, error) {
	retried := false
	for {
		c, err := s.connection(ctx, attempts)
		if err != nil {
			return nil, err
		}
		if ts, ok := s.cached(c); ok && !fresh {
			return ts, nil
		}
		select {
		case s.listing <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if ts, ok := s.cached(c); ok && !fresh {
			<-s.listing
			return ts, nil
		}
		s.mu.Lock()
		gen := s.listGen
		s.mu.Unlock()
		ts, err := s.fetchTools(ctx, c)
		<-s.listing
		if err == nil {
			s.mu.Lock()
			if s.conn == c {
				s.tools, s.toolsConn, s.toolsGen, s.listErr = ts, c, gen, nil
			}
			s.mu.Unlock()
			return ts, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !transportFailure(err) {
			s.mu.Lock()
			s.listErr = fmt.Errorf("listing tools: %w", err)
			s.mu.Unlock()
			return nil, s.errorf("upstream %s: listing tools: %w", s.name, err)
		}
		s.drop(c, err)
		if retried {
			return nil, s.unavailable(err)
		}
		retried, fresh = true, false
	}
}

func (s *server) fetchTools(ctx context.Context, c *conn) ([]Tool, error) {
	var out []Tool
	seen := map[string]bool{}
	for t, err := range c.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		seen[t.Name] = true
		if !s.cfg.exposes(t.Name) {
			continue
		}
		in, _ := t.InputSchema.(map[string]any)
		if in == nil {
			in = map[string]any{"type": "object"}
		}
		outSchema, _ := t.OutputSchema.(map[string]any)
		out = append(out, Tool{Server: s.name, Name: t.Name, Description: t.Description, InputSchema: in, OutputSchema: outSchema})
	}
	for _, name := range s.cfg.Tools {
		if !seen[name] {
			s.log.Warn("upstream: configured tool not offered by the server", "tool", name)
		}
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// tool finds an exposed tool, listing afresh once if the cached list lacks
// it (a server need not announce changes).
func (s *server) tool(ctx context.Context, name string) (Tool, error) {
	if !s.cfg.exposes(name) {
		return Tool{}, fmt.Errorf("%w %q on upstream %s", ErrUnknownTool, name, s.name)
	}
	for _, fresh := range []bool{false, true} {
		ts, err := s.toolList(ctx, dialAttempts, fresh)
		if err != nil {
			return Tool{}, err
		}
		if i := slices.IndexFunc(ts, func(t Tool) bool { return t.Name == name }); i >= 0 {
			return ts[i], nil
		}
	}
	return Tool{}, fmt.Errorf("%w %q on upstream %s", ErrUnknownTool, name, s.name)
}

func (s *server) call(ctx context.Context, tool string, args map[string]any) (Result, error) {
	if _, err := s.tool(ctx, tool); err != nil {
		return Result{}, err
	}
	retried := false
	for {
		c, err := s.connection(ctx, dialAttempts)
		if err != nil {
			return Result{}, err
		}
		res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err == nil {
			return toResult(res), nil
		}
		if ctx.Err() != nil {
			return Result{}, err
		}
		if !transportFailure(err) {
			return Result{}, s.errorf("upstream %s: tool %s: %w", s.name, tool, err)
		}
		s.drop(c, err)
		if retried {
			return Result{}, s.unavailable(err)
		}
		retried = true
	}
}

func toResult(r *mcp.CallToolResult) Result {
	var texts []string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	return Result{Structured: r.StructuredContent, Text: strings.Join(texts, "\n"), IsError: r.IsError}
}
