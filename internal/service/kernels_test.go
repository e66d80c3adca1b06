package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codecage/codecage/internal/service"
)

// kernelSession is a session of a service whose operator allows every
// kernel, with the default import policy (the kernels' code is not
// Python's to judge).
func kernelSession(t *testing.T) (*service.Service, string) {
	t.Helper()
	cfg := service.LeanTestConfig()
	cfg.Kernels = []string{"javascript", "typescript", "bash"}
	svc := newServiceWith(t, cfg)
	info, err := svc.CreateSession(context.Background(), service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	return svc, info.ID
}

func runIn(t *testing.T, svc *service.Service, id, lang, code string) *service.Result {
	t.Helper()
	res, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: "o", Language: lang, Code: code, Display: true})
	if err != nil {
		t.Fatalf("%s %q: %v", lang, code, err)
	}
	return res
}

func text(res *service.Result) string { return res.Display["text/plain"] }

func TestJavaScriptKernelKeepsState(t *testing.T) {
	svc, id := kernelSession(t)
	if res := runIn(t, svc, id, "js", "const z = 1; function twice(x) { return 2 * x }\nconsole.log('hello from node')"); !res.Success || res.Stdout != "hello from node\n" || res.Display != nil {
		t.Fatalf("first cell: %+v", res)
	}
	if res := runIn(t, svc, id, "javascript", "twice(z) + 40"); !res.Success || text(res) != "42" {
		t.Fatalf("z and twice are not kept: %+v", res)
	}
	// Top-level await, its declarations kept for the next cell.
	if res := runIn(t, svc, id, "js", "const v = await new Promise(r => setTimeout(() => r('late'), 50))\nv + '!'"); !res.Success || text(res) != "'late!'" {
		t.Fatalf("top-level await: %+v", res)
	}
	if res := runIn(t, svc, id, "js", "v"); !res.Success || text(res) != "'late'" {
		t.Fatalf("a variable of an awaiting cell is not kept: %+v", res)
	}
	// ES module imports, as E2B's kernel takes them.
	if res := runIn(t, svc, id, "js", "\n    import { readFileSync } from 'fs'\n    typeof readFileSync\n    "); !res.Success || text(res) != "'function'" {
		t.Fatalf("import: %+v", res)
	}
	// Python's state is its own, beside the kernel.
	if res := runIn(t, svc, id, "", "z = 'python'\nz"); !res.Success || !strings.Contains(string(res.Result), "python") {
		t.Fatalf("python beside node: %+v", res)
	}
	if res := runIn(t, svc, id, "js", "z"); text(res) != "1" {
		t.Fatalf("node's z after python's: %+v", res)
	}
}

// A thrown error is E2B's shape: the error's name, its message, the stack
// as the traceback; the kernel lives on.
func TestJavaScriptKernelErrors(t *testing.T) {
	svc, id := kernelSession(t)
	res := runIn(t, svc, id, "js", "let kept = 5\nfunction boom() { throw new TypeError('bad thing') }\nboom()")
	if res.Success || res.Error == nil || res.Error.Type != "TypeError" || res.Error.Message != "bad thing" || !strings.Contains(res.Error.Traceback, "at boom") {
		t.Fatalf("thrown error: %+v %+v", res, res.Error)
	}
	res = runIn(t, svc, id, "js", "throw 'plain'")
	if res.Error == nil || res.Error.Type != "string" || res.Error.Message != "'plain'" {
		t.Fatalf("a thrown string: %+v", res.Error)
	}
	res = runIn(t, svc, id, "js", "let x = ;")
	if res.Error == nil || res.Error.Type != "SyntaxError" {
		t.Fatalf("a syntax error: %+v", res.Error)
	}
	res = runIn(t, svc, id, "js", "await Promise.reject(new RangeError('nope'))")
	if res.Error == nil || res.Error.Type != "RangeError" || res.Error.Message != "nope" {
		t.Fatalf("a rejected await: %+v", res.Error)
	}
	if res := runIn(t, svc, id, "js", "kept"); text(res) != "5" {
		t.Fatalf("the kernel did not live on: %+v", res)
	}
}

func TestTypeScriptKernel(t *testing.T) {
	svc, id := kernelSession(t)
	code := `
interface Point { x: number; y: number }
type Id = string | number
enum Color { Red, Green = 5, Blue }
function subtract(x: number, y: number): number {
  return x - y;
}
class Box<T> {
  private items: T[] = [];
  constructor(public label: string) {}
  add(item: T): this { this.items.push(item); return this }
  get size(): number { return this.items.length }
}
const p: Point = { x: 1, y: 2 };
const b = new Box<number>('n').add(p.x as number).add(p.y!);
const message: string = "Hello World!"; console.log(message)
subtract(1, 2) + b.size + Color.Blue + b.label.length
`
	res := runIn(t, svc, id, "ts", code)
	if !res.Success || res.Stdout != "Hello World!\n" || text(res) != "8" {
		t.Fatalf("typescript: %+v %+v", res, res.Error)
	}
	// TypeScript and JavaScript share the context's kernel, as in E2B.
	if res := runIn(t, svc, id, "js", "subtract(10, 1)"); text(res) != "9" {
		t.Fatalf("js after ts: %+v", res)
	}
}

func TestBashKernelKeepsVariablesAndDirectory(t *testing.T) {
	svc, id := kernelSession(t)
	if res := runIn(t, svc, id, "bash", "GREETING=hello\nmkdir -p sub && cd sub\necho started"); !res.Success || res.Stdout != "started\n" {
		t.Fatalf("first cell: %+v", res)
	}
	if res := runIn(t, svc, id, "bash", "echo $GREETING from $(basename $PWD)"); !res.Success || res.Stdout != "hello from sub\n" {
		t.Fatalf("variable and cwd not kept: %+v", res)
	}
	// A failed last command is E2B's bash error: its status as the value.
	res := runIn(t, svc, id, "bash", "echo out; ls /nonexistent")
	if res.Success || res.Error == nil || res.Error.Message != "2" || res.Stdout != "out\n" || !strings.Contains(res.Stderr, "nonexistent") {
		t.Fatalf("failed command: %+v %+v", res, res.Error)
	}
	// Per-run variables go after the run.
	r, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: "o", Language: "bash", Code: "echo $FOO", Env: map[string]string{"FOO": "bar"}})
	if err != nil || r.Stdout != "bar\n" {
		t.Fatalf("env: %v %+v", err, r)
	}
	if res := runIn(t, svc, id, "bash", "echo ${FOO:-default}"); res.Stdout != "default\n" {
		t.Fatalf("env kept after its run: %+v", res)
	}
	// exit ends the kernel; the next run gets a fresh one.
	if res := runIn(t, svc, id, "bash", "exit 3"); res.Error == nil || res.Error.Type != "ContextRestarting" {
		t.Fatalf("exit: %+v", res.Error)
	}
	if res := runIn(t, svc, id, "bash", "echo again"); !res.Success || res.Stdout != "again\n" {
		t.Fatalf("after exit: %+v", res)
	}
}

// A kernel that never ends is stopped at the run's time limit; the
// session, its Python state and the next run are fine.
func TestKernelLoopingForeverIsStopped(t *testing.T) {
	svc, id := kernelSession(t)
	ctx := context.Background()
	if res := runIn(t, svc, id, "", "kept = 'python state'"); !res.Success {
		t.Fatalf("python: %+v", res)
	}
	for _, lang := range []string{"js", "bash"} {
		loop := map[string]string{"js": "let n = 0; while (true) { n++ }", "bash": "while :; do :; done"}[lang]
		start := time.Now()
		res, err := svc.Execute(ctx, service.Request{SessionID: id, Owner: "o", Language: lang, Code: loop, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("%s loop: %v", lang, err)
		}
		if res.Success || res.Error == nil || res.Error.Type != "TimeoutError" {
			t.Fatalf("%s loop: %+v %+v", lang, res, res.Error)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("%s loop ended after %s", lang, took)
		}
		if res := runIn(t, svc, id, lang, map[string]string{"js": "1 + 1", "bash": "echo ok"}[lang]); !res.Success {
			t.Fatalf("%s after the loop: %+v %+v", lang, res, res.Error)
		}
	}
	if res := runIn(t, svc, id, "", "kept"); !res.Success || !strings.Contains(string(res.Result), "python state") {
		t.Fatalf("the session lost its python state: %+v", res)
	}
}

func TestKernelLanguagesRefused(t *testing.T) {
	svc, id := kernelSession(t)
	_, err := svc.Execute(context.Background(), service.Request{SessionID: id, Owner: "o", Language: "cobol", Code: "x"})
	if !errors.Is(err, service.ErrUnknownLanguage) {
		t.Fatalf("cobol: %v", err)
	}
	_, err = svc.Execute(context.Background(), service.Request{Language: "js", Code: "1"})
	if !errors.Is(err, service.ErrInvalidRequest) {
		t.Fatalf("a kernel outside a session: %v", err)
	}
	// Closed unless the operator allows it.
	off := newServiceWith(t, service.LeanTestConfig())
	info, err := off.CreateSession(context.Background(), service.SessionRequest{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = off.Execute(context.Background(), service.Request{SessionID: info.ID, Owner: "o", Language: "bash", Code: "echo hi"})
	if !errors.Is(err, service.ErrInvalidRequest) || !strings.Contains(err.Error(), "SANDBOX_KERNELS") {
		t.Fatalf("bash without SANDBOX_KERNELS: %v", err)
	}
}
