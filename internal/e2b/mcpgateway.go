package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/codecage/codecage/internal/e2b/wire"
	"github.com/codecage/codecage/internal/service"
)

// E2B's MCP gateway, translated: the SDK's `mcp` on create opens the
// sandbox's gateway outside it (service.OpenGateway); its
// `mcp-gateway --config '...'` command, run as root, which would carry the
// creator's secrets into the sandbox, never runs there: it hands the
// gateway the SDK's token (GATEWAY_ACCESS_TOKEN) and ends at once; the
// token file the SDK reads (getMcpToken) is answered from the gateway;
// port 50005 is the gateway's endpoint.

const (
	// mcpTemplate is the template the SDKs ask for with `mcp`: the base
	// sandbox here, the gateway being the server's.
	mcpTemplate = "mcp-gateway"
	// mcpTokenFile is where the SDKs read the gateway's token.
	mcpTokenFile = "/etc/mcp-gateway/.token"
	// mcpCommand starts the SDK's command line.
	mcpCommand = "mcp-gateway "
)

// mcpOf reads a create's `mcp`: each server's name and its values.
func mcpOf(raw json.RawMessage) (map[string]map[string]any, error) {
	if !given(raw) {
		return nil, nil
	}
	var asked map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&asked); err != nil {
		return nil, fmt.Errorf("mcp: each server's configuration must be an object of its values: %v", err)
	}
	for name, v := range asked {
		if v == nil {
			asked[name] = map[string]any{}
		}
	}
	return asked, nil
}

// gatewayCommand reports whether a process start is the SDK's start of the
// gateway (bash -l -c "mcp-gateway --config ..."), and its token.
func gatewayCommand(cmd string, args []string, envs map[string]string) (token string, ok bool) {
	if len(args) == 0 {
		return "", false
	}
	line := strings.TrimSpace(args[len(args)-1])
	if !strings.HasPrefix(line, mcpCommand) || !strings.HasSuffix(cmd, "bash") && !strings.HasSuffix(cmd, "sh") {
		return "", false
	}
	return envs["GATEWAY_ACCESS_TOKEN"], true
}

// mcpTemplateOf is the template a create with `mcp` starts from.
func mcpTemplateOf(template string) string {
	if template == mcpTemplate {
		return "base"
	}
	return template
}

// startGateway answers the SDK's start of the gateway as a process that
// ran and ended: exit 0 once the gateway has the token, else 1 with why
// on stderr (the SDK then says "Failed to start MCP gateway: ...").
func (s *Server) startGateway(ctx context.Context, token string, stream *connect.ServerStream[wire.ProcessEvent]) error {
	ref := sandboxOf(ctx)
	if err := stream.Send(&wire.ProcessEvent{Event: wire.Event{Start: &wire.StartEvent{PID: 0}}}); err != nil {
		return err
	}
	end := &wire.EndEvent{ExitCode: 0, Exited: true, Status: "exit status 0"}
	if err := s.svc.StartGateway(ctx, ref.id, ref.owner, token); err != nil {
		msg := "codecage: " + err.Error() + "\n"
		if err := stream.Send(&wire.ProcessEvent{Event: wire.Event{Data: &wire.DataEvent{Stderr: []byte(msg)}}}); err != nil {
			return err
		}
		end = &wire.EndEvent{ExitCode: 1, Exited: true, Status: "exit status 1"}
	}
	return stream.Send(&wire.ProcessEvent{Event: wire.Event{End: end}})
}

// serveGatewayToken answers a read of the gateway's token file from the
// gateway: the token is never a file of the sandbox's.
func (s *Server) serveGatewayToken(w http.ResponseWriter, r *http.Request, ref sandboxRef) {
	token, err := s.svc.GatewayToken(r.Context(), ref.id, ref.owner)
	if err == nil && token == "" {
		err = fmt.Errorf("%w: %s: the MCP gateway has not been started (its token is given when the SDK starts it)", service.ErrFileNotFound, mcpTokenFile)
	}
	if errors.Is(err, service.ErrNoGateway) {
		err = fmt.Errorf("%w: %s: %v", service.ErrFileNotFound, mcpTokenFile, err)
	}
	if err != nil {
		fileError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(token)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(token))
}

// askedGateway reads and checks a create's `mcp` (nil when it asks for
// none); a refusal is answered on w.
func (s *Server) askedGateway(w http.ResponseWriter, body *newSandbox) (map[string]map[string]any, bool) {
	asked, err := mcpOf(body.MCP)
	switch {
	case err != nil:
	case asked == nil:
		return nil, true
	case !s.svc.OffersGateway():
		err = errors.New("mcp: this server allows no MCP gateway servers (the operator's SANDBOX_TOOLS_CONFIG servers with a gateway block)")
	default:
		if err := s.svc.CheckGateway(asked); err != nil {
			s.serviceError(w, err)
			return nil, false
		}
		return asked, true
	}
	writeAPIError(w, http.StatusBadRequest, err.Error())
	return nil, false
}
