package scenarios_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// The code context steps: E2B's code interpreter contexts (port 49999's
// /contexts), as its SDK's createCodeContext, listCodeContexts,
// restartCodeContext and removeCodeContext send them; runCode in one is
// an execute step with context=. REST and MCP have no code contexts: a
// scenario of these steps names e2b alone in its -- surfaces --.

// interp is the headers of a request to the code interpreter of sandbox id.
func (p *player) interp(ctx context.Context, key, id string) (map[string]string, string) {
	h, failed := p.envd(ctx, key, id)
	if h != nil {
		h["E2b-Sandbox-Port"] = "49999"
	}
	return h, failed
}

func (p *player) codeContext(ctx context.Context, st step) string {
	p.onlyE2B(st)
	key := st.args["key"]
	id, failed := p.sessionOf(ctx, st)
	if failed != "" {
		return failed
	}
	h, failed := p.interp(ctx, key, id)
	if failed != "" {
		return failed
	}
	switch st.op {
	case "context":
		body := map[string]any{} // only what the step gives, as the SDK sends
		for _, f := range []string{"language", "cwd"} {
			if v, ok := st.args[f]; ok {
				body[f] = v
			}
		}
		b, _ := json.Marshal(body)
		answer, m := p.call(ctx, "POST", p.e2b+"/contexts", b, h)
		cid, _ := m["id"].(string)
		if cid == "" {
			return answer
		}
		as := cmp.Or(st.args["as"], "$ctx")
		p.name(cid, as)
		return strings.ReplaceAll(answer, cid, as)
	case "contexts":
		answer, _ := p.call(ctx, "GET", p.e2b+"/contexts", nil, h)
		return p.nameContexts(answer)
	case "removecontext":
		answer, _ := p.call(ctx, "DELETE", p.e2b+"/contexts/"+url.PathEscape(p.resolve(st.args["context"])), nil, h)
		return answer
	}
	answer, _ := p.call(ctx, "POST", p.e2b+"/contexts/"+url.PathEscape(p.resolve(st.args["context"]))+"/restart", nil, h)
	return answer
}

// nameContexts names the ids of a context list (its rendered answer) no
// step gave: the defaults, $python, $javascript... by their language.
func (p *player) nameContexts(answer string) string {
	_, body, _ := strings.Cut(answer, "\n")
	var list []map[string]any
	if json.Unmarshal([]byte(body), &list) != nil {
		return answer
	}
	for _, c := range list {
		cid, _ := c["id"].(string)
		if cid == "" || p.names[cid] != "" || p.ids[cid] != "" { // unnamed, or named already
			continue
		}
		name := "$" + fmt.Sprint(c["language"])
		for i := 2; p.ids[name] != ""; i++ {
			name = fmt.Sprintf("$%v%d", c["language"], i)
		}
		p.name(cid, name)
		answer = strings.ReplaceAll(answer, cid, name)
	}
	return answer
}
