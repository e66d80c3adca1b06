// Package e2b is codecage's E2B surface: the control plane (REST) and the
// in-sandbox daemons (envd over the Connect protocol, the code
// interpreter's /execute) that the official E2B SDKs call, answered from
// codecage's own sessions. A program written for E2B runs unchanged with
// E2B_API_URL and E2B_SANDBOX_URL pointed at SANDBOX_E2B_LISTEN.
//
// An E2B sandbox is a codecage session whose workspace is at /home/user
// and whose lifetime is E2B's timeout; its commands run in the session's
// command jail beside the interpreter; a code-interpreter context is an
// interpreter state of the session. Like every surface it holds no
// sandbox logic: each call goes to the sandbox service, which audits and
// meters it. What it keeps itself is protocol state: the processes it
// started (for pids, Connect and SendSignal) and the contexts' names.
//
// Each call in a sandbox carries the sandbox's access token, an HMAC of
// the sandbox id and the API key's name, so a key cannot reach another
// key's sandbox and no table of tokens is kept.
package e2b
