package mcpserver

import (
	"encoding/base64"
	"fmt"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codecage/codecage/internal/fleet"
	"github.com/codecage/codecage/internal/service"
)

// maxImageContent bounds the images one execute_code answer attaches
// (figures, display() images and the last value's PNG together); the
// harness bounds the outputs' count and bytes already.
const maxImageContent = 16

// pngMIME is the representation sent as image content rather than
// inside the structured result, where a model would read it as base64.
const pngMIME = "image/png"

// richImages moves the PNGs of a rich result (Display and Outputs) out of
// the structured result r, each replaced by a note, and returns them as
// image content, in the order the code showed them.
func richImages(r *service.Result) []mcp.Content {
	var out []mcp.Content
	take := func(data map[string]string) map[string]string {
		d, ok := data[pngMIME]
		if !ok {
			return data
		}
		data = maps.Clone(data)
		raw, err := base64.StdEncoding.DecodeString(d)
		switch {
		case err != nil:
			data[pngMIME] = "(not valid base64: left out)"
		case len(out) >= maxImageContent:
			data[pngMIME] = fmt.Sprintf("(left out: at most %d images are attached)", maxImageContent)
		default:
			out = append(out, &mcp.ImageContent{MIMEType: pngMIME, Data: raw})
			data[pngMIME] = fmt.Sprintf("(attached as image %d)", len(out))
		}
		return data
	}
	outputs := make([]fleet.Output, len(r.Outputs))
	for i, o := range r.Outputs {
		if !o.AfterResult {
			o.Data = take(o.Data)
		}
		outputs[i] = o
	}
	if r.Display != nil {
		r.Display = take(r.Display)
	}
	for i, o := range outputs {
		if o.AfterResult {
			outputs[i].Data = take(o.Data)
		}
	}
	if r.Outputs != nil {
		r.Outputs = outputs
	}
	return out
}
