// codecage's JavaScript and TypeScript kernel: runs inside the jail as
// `node --expose-internals -e <this>`, started by the Python harness
// (kernels.py) for one context. It reads one JSON request a line from fd 3
// ({code, lang, env}) and answers each with one JSON line on fd 4
// ({text, display, error}); the code's console output goes to the
// sandbox's stdout and stderr as it comes. The code runs in this process's
// global scope, so its variables, functions and classes stay from one
// request to the next, as in E2B's JavaScript kernel. The jail, not this
// file, is the boundary.
"use strict";

const fs = require("fs");
const vm = require("vm");
const util = require("util");
const nodeModule = require("module");

// Node's own REPL transform for `await` at top level: it hoists the
// cell's declarations so that they outlive the async wrapper, and returns
// the last expression's value. Internal, hence --expose-internals; a
// plain async wrapper (no hoisting) stands in where it is missing.
let processTopLevelAwait = null;
try {
  processTopLevelAwait = require("internal/repl/await").processTopLevelAwait;
} catch (e) {
  processTopLevelAwait = null;
}

const MAX_TEXT = 64 * 1024;
const clip = (s) => (s.length > MAX_TEXT ? s.slice(0, MAX_TEXT) + "... [truncated]" : s);
const { JSONstringify, JSONparse } = { JSONstringify: JSON.stringify, JSONparse: JSON.parse };
const writeSync = fs.writeSync;

globalThis.require = nodeModule.createRequire(process.cwd() + "/");

// ---------------------------------------------------------------------
// Tokens: enough of JavaScript's lexical grammar to find where types and
// imports are (strings, templates, comments and regular expressions are
// skipped whole).
// ---------------------------------------------------------------------

const PUNCT = ["...", "===", "!==", "**=", "<<=", "&&=", "||=", "??=", "=>", "?.", "??", "==", "!=", "<=", "&&", "||",
  "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<", "**"];
const KEYWORDS_BEFORE_EXPR = new Set(["return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw",
  "case", "do", "else", "yield", "await"]);

function isIdStart(c) {
  return /[A-Za-z_$\u0080-\uffff]/.test(c);
}
function isIdPart(c) {
  return /[A-Za-z0-9_$\u0080-\uffff]/.test(c);
}

function tokenize(src) {
  const toks = [];
  let i = 0;
  let nl = false;
  const n = src.length;
  const exprEnd = () => {
    const p = toks[toks.length - 1];
    if (!p) return false;
    if (p.t === "id") return !KEYWORDS_BEFORE_EXPR.has(p.v);
    if (p.t === "num" || p.t === "str" || p.t === "tpl" || p.t === "re") return true;
    return p.v === ")" || p.v === "]" || p.v === "}";
  };
  const push = (t, s, e) => {
    toks.push({ t, v: src.slice(s, e), s, e, nl });
    nl = false;
  };
  while (i < n) {
    const c = src[i];
    if (c === "\n") {
      nl = true;
      i++;
      continue;
    }
    if (c === " " || c === "\t" || c === "\r" || c === "\v" || c === "\f" || c === "\u00a0" || c === "\ufeff") {
      i++;
      continue;
    }
    if (c === "/" && src[i + 1] === "/") {
      while (i < n && src[i] !== "\n") i++;
      continue;
    }
    if (c === "/" && src[i + 1] === "*") {
      const end = src.indexOf("*/", i + 2);
      const stop = end < 0 ? n : end + 2;
      if (src.slice(i, stop).includes("\n")) nl = true;
      i = stop;
      continue;
    }
    const s = i;
    if (c === '"' || c === "'") {
      i++;
      while (i < n && src[i] !== c && src[i] !== "\n") i += src[i] === "\\" ? 2 : 1;
      i++;
      push("str", s, Math.min(i, n));
      continue;
    }
    if (c === "`") {
      i = skipTemplate(src, i);
      push("tpl", s, i);
      continue;
    }
    if (/[0-9]/.test(c) || (c === "." && /[0-9]/.test(src[i + 1] || ""))) {
      i++;
      while (i < n && /[0-9A-Za-z_.]/.test(src[i])) i++;
      push("num", s, i);
      continue;
    }
    if (isIdStart(c) || c === "#" || c === "\\") {
      i++;
      while (i < n && isIdPart(src[i])) i++;
      push("id", s, i);
      continue;
    }
    if (c === "/" && !exprEnd()) {
      // A regular expression literal.
      i++;
      let cls = false;
      while (i < n && src[i] !== "\n") {
        if (src[i] === "\\") {
          i += 2;
          continue;
        }
        if (src[i] === "[") cls = true;
        else if (src[i] === "]") cls = false;
        else if (src[i] === "/" && !cls) break;
        i++;
      }
      i++;
      while (i < n && isIdPart(src[i])) i++;
      push("re", s, Math.min(i, n));
      continue;
    }
    let p = PUNCT.find((op) => src.startsWith(op, i));
    if (p === "?." && /[0-9]/.test(src[i + 2] || "")) p = undefined; // a ? .5 : 1
    i += p ? p.length : 1;
    push("p", s, i);
  }
  return toks;
}

function skipTemplate(src, i) {
  const n = src.length;
  i++;
  while (i < n && src[i] !== "`") {
    if (src[i] === "\\") {
      i += 2;
      continue;
    }
    if (src[i] === "$" && src[i + 1] === "{") {
      i += 2;
      let depth = 1;
      while (i < n && depth > 0) {
        const c = src[i];
        if (c === "`") {
          i = skipTemplate(src, i);
          continue;
        }
        if (c === '"' || c === "'") {
          i++;
          while (i < n && src[i] !== c) i += src[i] === "\\" ? 2 : 1;
        } else if (c === "{") depth++;
        else if (c === "}") depth--;
        i++;
      }
      continue;
    }
    i++;
  }
  return Math.min(i + 1, n);
}

// ---------------------------------------------------------------------
// TypeScript: types are erased (replaced by spaces, so that positions and
// line numbers stay), enums become objects, constructor parameter
// properties become assignments. What is not covered (namespaces,
// decorators, overload signatures, abstract members) is a syntax error, as
// it would be in JavaScript.
// ---------------------------------------------------------------------

const MODIFIERS = new Set(["public", "private", "protected", "readonly", "abstract", "override", "declare"]);
const TYPE_PREFIX = new Set(["keyof", "typeof", "readonly", "unique", "infer", "asserts", "new", "abstract"]);

function stripTypes(src) {
  const toks = tokenize(src);
  const cut = []; // [start, end) ranges to blank
  const inserts = []; // {at, text}
  const replace = []; // {s, e, text}
  const n = toks.length;
  const tok = (i) => toks[i] || { t: "eof", v: "", s: src.length, e: src.length, nl: true };
  const isP = (i, v) => tok(i).t === "p" && tok(i).v === v;
  const isId = (i, v) => tok(i).t === "id" && (v === undefined || tok(i).v === v);
  const exprEndAt = (i) => {
    const p = tok(i);
    if (p.t === "id") return !KEYWORDS_BEFORE_EXPR.has(p.v);
    if (p.t === "num" || p.t === "str" || p.t === "tpl" || p.t === "re") return true;
    return p.t === "p" && (p.v === ")" || p.v === "]" || p.v === "}");
  };
  const stmtStart = (i) => i === 0 || tok(i).nl || isP(i - 1, ";") || isP(i - 1, "{") || isP(i - 1, "}");

  // match returns the index of the bracket closing the one at i.
  const match = (i) => {
    const open = tok(i).v;
    const close = { "(": ")", "[": "]", "{": "}" }[open];
    let depth = 0;
    for (let j = i; j < n; j++) {
      if (toks[j].t !== "p") continue;
      if (toks[j].v === open) depth++;
      else if (toks[j].v === close && --depth === 0) return j;
    }
    return n - 1;
  };
  const matchAngle = (i) => {
    let depth = 0;
    for (let j = i; j < n; j++) {
      const t = toks[j];
      if (t.t !== "p") continue;
      if (t.v === "<") depth++;
      else if (t.v === ">" && --depth === 0) return j;
      else if (t.v === "(" || t.v === "[" || t.v === "{") j = match(j);
      else if (t.v === ";" || t.v === ")" || t.v === "]" || t.v === "}") return -1;
    }
    return -1;
  };
  // Whether tokens i..j (exclusive) can be type arguments of a call.
  const typeArgsOnly = (i, j) => {
    for (let k = i; k < j; k++) {
      const t = toks[k];
      if (t.t === "p" && !["<", ">", ",", ".", "[", "]", "|", "&", "{", "}", ":", ";", "?", "(", ")", "=>"].includes(t.v)) return false;
      if (t.t === "re" || t.t === "tpl") return false;
    }
    return true;
  };

  function skipType(i) {
    if (isP(i, "|") || isP(i, "&")) i++;
    i = skipPostfixType(i);
    while (isP(i, "|") || isP(i, "&")) i = skipPostfixType(i + 1);
    if (isId(i, "extends") && !tok(i).nl) {
      i = skipPostfixType(i + 1);
      if (isP(i, "?")) {
        i = skipType(i + 1);
        if (isP(i, ":")) i = skipType(i + 1);
      }
    }
    return i;
  }
  function skipPostfixType(i) {
    while (isId(i) && TYPE_PREFIX.has(tok(i).v) && (isId(i + 1) || isP(i + 1, "(") || isP(i + 1, "[") || isP(i + 1, "{"))) i++;
    const t = tok(i);
    if (isP(i, "(")) {
      i = match(i) + 1;
      if (isP(i, "=>")) return skipType(i + 1);
    } else if (isP(i, "<")) {
      const j = matchAngle(i);
      if (j < 0) return i;
      return skipPostfixType(j + 1);
    } else if (isP(i, "{") || isP(i, "[")) {
      i = match(i) + 1;
    } else if (t.t === "str" || t.t === "num" || t.t === "tpl") {
      i++;
    } else if (isP(i, "-") && tok(i + 1).t === "num") {
      i += 2;
    } else if (t.t === "id") {
      i++;
      while (isP(i, ".") && isId(i + 1)) i += 2;
      if (isP(i, "<") && !tok(i).nl) {
        const j = matchAngle(i);
        if (j > 0) i = j + 1;
      }
      if (isId(i, "is") && !tok(i).nl) return skipType(i + 1);
    } else {
      return i;
    }
    while (isP(i, "[") && !tok(i).nl) i = match(i) + 1;
    return i;
  }
  const cutTo = (a, b) => {
    if (b > a) cut.push([tok(a).s, tok(b - 1).e]);
  };
  // endOfStatement: the index after the statement starting at i (a
  // semicolon, a newline at depth 0 after a complete part, or a block).
  const endOfStatement = (i) => {
    for (let j = i; j < n; j++) {
      if (isP(j, ";")) return j + 1;
      if (isP(j, "{") || isP(j, "(") || isP(j, "[")) {
        j = match(j);
        if (isP(j, "}") && (tok(j + 1).nl || j + 1 >= n)) return j + 1;
        continue;
      }
      if (j > i && tok(j + 1).nl && !isP(j + 1, "|") && !isP(j + 1, "&") && !isP(j, "=") && !isP(j, "|") && !isP(j, "&")) return j + 1;
    }
    return n;
  };

  function enumCode(i, end) {
    // `enum E { A, B = 5, C }` from the name at i to the closing brace end.
    const name = tok(i).v;
    const open = i + 1;
    const parts = [];
    let value = -1;
    let numeric = true;
    let k = open + 1;
    while (k < end) {
      const member = tok(k);
      const key = member.t === "str" ? member.v : JSONstringify(member.v);
      k++;
      let init = null;
      if (isP(k, "=")) {
        const start = k + 1;
        let depth = 0;
        while (k < end && !(depth === 0 && isP(k, ","))) {
          if (isP(k, "(") || isP(k, "[") || isP(k, "{")) depth++;
          if (isP(k, ")") || isP(k, "]") || isP(k, "}")) depth--;
          k++;
        }
        init = src.slice(tok(start).s, tok(k - 1).e);
      }
      if (init === null) {
        value++;
        parts.push(numeric ? `${name}[${name}[${key}] = ${value}] = ${key};` : `${name}[${key}] = undefined;`);
      } else if (/^-?\d+(\.\d+)?$/.test(init.trim())) {
        value = Number(init);
        numeric = true;
        parts.push(`${name}[${name}[${key}] = ${init}] = ${key};`);
      } else {
        numeric = false;
        parts.push(`${name}[${key}] = ${init};`);
      }
      if (isP(k, ",")) k++;
    }
    return `var ${name}; (function (${name}) { ${parts.join(" ")} })(${name} || (${name} = {}));`;
  }

  // The bracket frames: kind "paren", "class", "object", "block", "array";
  // ternaries open in each.
  const frames = [{ kind: "block", ternary: 0, decl: null }];
  let classHeader = false; // between `class` and its body
  let importing = false; // in an import or export clause
  let ctorParams = null; // a constructor's parameter properties, by name
  let pendingCtor = null;
  for (let i = 0; i < n; i++) {
    const t = toks[i];
    const f = frames[frames.length - 1];
    if (t.t === "id") {
      const v = t.v;
      const prev = tok(i - 1);
      const afterDot = prev.t === "p" && (prev.v === "." || prev.v === "?.");
      if (afterDot) continue;
      if (stmtStart(i) && f.kind !== "object" && f.kind !== "class") {
        if ((v === "interface" && isId(i + 1)) || (v === "declare" && isId(i + 1))) {
          let j = i + 1;
          if (v === "interface") {
            while (j < n && !isP(j, "{")) j++;
            j = match(j) + 1;
          } else {
            j = endOfStatement(i + 1);
          }
          cutTo(i, j);
          i = j - 1;
          continue;
        }
        if (v === "type" && isId(i + 1) && (isP(i + 2, "=") || isP(i + 2, "<"))) {
          let j = i + 2;
          if (isP(j, "<")) j = matchAngle(j) + 1;
          if (isP(j, "=")) j = skipType(j + 1);
          if (isP(j, ";")) j++;
          cutTo(i, j);
          i = j - 1;
          continue;
        }
        if ((v === "import" || v === "export") && isId(i + 1, "type") && !isP(i + 2, "=")) {
          const j = endOfStatement(i);
          cutTo(i, j);
          i = j - 1;
          continue;
        }
        if (v === "enum" || (v === "const" && isId(i + 1, "enum"))) {
          const at = v === "enum" ? i + 1 : i + 2;
          if (isId(at) && isP(at + 1, "{")) {
            const end = match(at + 1);
            const text = enumCode(at, end);
            const lines = src.slice(t.s, tok(end).e).split("\n").length - 1;
            replace.push({ s: t.s, e: tok(end).e, text: text + "\n".repeat(lines) });
            i = end;
            continue;
          }
        }
        if (v === "abstract" && isId(i + 1, "class")) {
          cutTo(i, i + 1);
          continue;
        }
      }
      if (v === "import" || v === "export") importing = true;
      if (v === "from") importing = false;
      if (v === "class") classHeader = true;
      if (classHeader && v === "implements") {
        let j = i + 1;
        while (j < n && !isP(j, "{")) j++;
        cutTo(i, j);
        i = j - 1;
        continue;
      }
      if ((v === "let" || v === "const" || v === "var") && (isId(i + 1) || isP(i + 1, "{") || isP(i + 1, "["))) {
        f.decl = "name";
      }
      // Modifiers of class members and of constructor parameters.
      if (MODIFIERS.has(v) && (isId(i + 1) || isP(i + 1, "[") || isP(i + 1, "{"))) {
        const memberStart = f.kind === "class" && (isP(i - 1, "{") || isP(i - 1, ";") || isP(i - 1, "}") || t.nl || MODIFIERS.has(prev.v) || prev.v === "static");
        const paramStart = f.kind === "paren" && f.ctor && (isP(i - 1, "(") || isP(i - 1, ",") || MODIFIERS.has(prev.v));
        if (memberStart || paramStart) {
          cutTo(i, i + 1);
          if (paramStart && isId(i + 1) && !MODIFIERS.has(tok(i + 1).v)) f.ctor.push(tok(i + 1).v);
          continue;
        }
      }
      if ((v === "as" || v === "satisfies") && !importing && exprEndAt(i - 1) && !t.nl) {
        const j = skipType(i + 1);
        if (j > i + 1) {
          cutTo(i, j);
          i = j - 1;
          continue;
        }
      }
      // Type parameters of a declaration, type arguments of a call.
      if (isP(i + 1, "<") && !tok(i + 1).nl) {
        const j = matchAngle(i + 1);
        const declared = prev.t === "id" && (prev.v === "function" || prev.v === "class" || prev.v === "interface");
        const method = (f.kind === "class" || f.kind === "object") && isP(j + 1, "(");
        const call = isP(j + 1, "(") || (classHeader && isP(j + 1, "{")) || (isP(j + 1, "{") && prev.v === "extends");
        if (j > 0 && (declared || method || (call && typeArgsOnly(i + 2, j)))) {
          cutTo(i + 1, j + 1);
          i = j;
          continue;
        }
      }
      continue;
    }
    if (t.t !== "p") continue;
    switch (t.v) {
      case "(": {
        const frame = { kind: "paren", ternary: 0, decl: null, ctor: null };
        if (isId(i - 1, "constructor") && frames[frames.length - 1].kind === "class") {
          frame.ctor = [];
        }
        // Generic arrow functions: <T>(x: T) => x.
        frames.push(frame);
        break;
      }
      case "[":
        frames.push({ kind: "array", ternary: 0, decl: null });
        break;
      case "{": {
        let kind = "block";
        const prev = tok(i - 1);
        if (classHeader) {
          kind = "class";
          classHeader = false;
        } else if (i > 0 && prev.t === "p" && ["(", ",", "=", ":", "[", "?", "||", "&&", "??", "...", "!", "+", "-", "==", "===", "!=", "!=="].includes(prev.v)) {
          kind = "object";
        } else if (prev.t === "id" && (prev.v === "return" || prev.v === "typeof" || prev.v === "yield" || prev.v === "await")) {
          kind = "object";
        }
        const frame = { kind, ternary: 0, decl: null };
        if (pendingCtor && isP(i - 1, ")") === false) {
          // the body follows a return type
        }
        if (pendingCtor) {
          if (pendingCtor.length) inserts.push({ at: t.e, text: pendingCtor.map((p) => `this.${p} = ${p};`).join(" ") });
          pendingCtor = null;
        }
        frames.push(frame);
        break;
      }
      case ")": {
        const closed = frames.length > 1 ? frames.pop() : f;
        if (closed.ctor) pendingCtor = closed.ctor;
        const g = frames[frames.length - 1];
        // A return type: `function f(): T {`, `(x): T => x`, `m(): T {}`.
        if (isP(i + 1, ":") && g.ternary === 0) {
          const j = skipType(i + 2);
          cutTo(i + 1, j);
          i = j - 1;
        }
        break;
      }
      case "]":
      case "}":
        if (frames.length > 1) frames.pop();
        if (t.v === "}") importing = false;
        break;
      case ";":
        f.decl = null;
        importing = false;
        break;
      case "=":
        if (f.decl === "name") f.decl = "init";
        break;
      case ",":
        if (f.decl === "init" && frames.length) f.decl = "name";
        break;
      case "?":
        if (isP(i + 1, ":") || ((isP(i + 1, ")") || isP(i + 1, ",")) && f.kind === "paren")) {
          cutTo(i, i + 1); // an optional parameter or member
        } else {
          f.ternary++;
        }
        break;
      case "!":
        if (exprEndAt(i - 1) && !t.nl && (tok(i + 1).nl || [".", "?.", ")", "]", ";", ",", "[", ":", "}", "=", ""].includes(tok(i + 1).v))) {
          cutTo(i, i + 1); // a non-null assertion
        }
        break;
      case ":": {
        if (f.ternary > 0) {
          f.ternary--;
          break;
        }
        const prev = tok(i - 1);
        const named = prev.t === "id" || prev.t === "str" || isP(i - 1, "?") || isP(i - 1, "!") || isP(i - 1, "]") || isP(i - 1, "}");
        const annotated = f.kind === "paren" || (f.kind === "class" && named) || (f.decl === "name" && named);
        if (annotated) {
          const j = skipType(i + 1);
          cutTo(i, j);
          i = j - 1;
        }
        break;
      }
    }
  }
  // Apply: replacements and blanks keep every line where it was.
  const edits = [];
  for (const [s, e] of cut) edits.push({ s, e, text: src.slice(s, e).replace(/[^\n]/g, " ") });
  for (const r of replace) edits.push(r);
  for (const ins of inserts) edits.push({ s: ins.at, e: ins.at, text: " " + ins.text });
  edits.sort((a, b) => a.s - b.s || a.e - b.e);
  let out = "";
  let at = 0;
  for (const ed of edits) {
    if (ed.s < at) continue; // nested in one already applied
    out += src.slice(at, ed.s) + ed.text;
    at = ed.e;
  }
  return out + src.slice(at);
}

// ---------------------------------------------------------------------
// ES module imports at the top of a cell become require calls, as E2B's
// kernel's CommonJS transform does; `export` before a declaration goes.
// ---------------------------------------------------------------------

function defaultOf(m) {
  return m && m.__esModule ? m.default : m;
}
globalThis.__codecage_default = defaultOf;

function esmToCommonJS(src) {
  const specifiers = (names) =>
    names.replace(/\s+as\s+/g, ": ").replace(/\btype\s+/g, "");
  return src
    .replace(/^([ \t]*)import\s+([\w$]+)\s*,\s*(\{[^}]*\})\s*from\s*(['"][^'"\n]+['"])[ \t]*;?/gm, (m, ind, def, names, mod) =>
      `${ind}const ${def} = __codecage_default(require(${mod})), ${specifiers(names)} = require(${mod});`)
    .replace(/^([ \t]*)import\s+(\{[^}]*\})\s*from\s*(['"][^'"\n]+['"])[ \t]*;?/gm, (m, ind, names, mod) =>
      `${ind}const ${specifiers(names)} = require(${mod});`)
    .replace(/^([ \t]*)import\s+\*\s+as\s+([\w$]+)\s+from\s*(['"][^'"\n]+['"])[ \t]*;?/gm, (m, ind, name, mod) =>
      `${ind}const ${name} = require(${mod});`)
    .replace(/^([ \t]*)import\s+([\w$]+)\s+from\s*(['"][^'"\n]+['"])[ \t]*;?/gm, (m, ind, name, mod) =>
      `${ind}const ${name} = __codecage_default(require(${mod}));`)
    .replace(/^([ \t]*)import\s*(['"][^'"\n]+['"])[ \t]*;?/gm, (m, ind, mod) => `${ind}require(${mod});`)
    .replace(/^([ \t]*)export\s+(default\s+)?(?=(async\s+)?(function|class|const|let|var)\b)/gm, "$1");
}

// ---------------------------------------------------------------------
// Running a cell.
// ---------------------------------------------------------------------

function dedent(code) {
  // A cell whose every line is indented the same runs, as E2B's does.
  const lines = code.split("\n");
  let indent = null;
  for (const line of lines) {
    if (!line.trim()) continue;
    const m = /^[ \t]*/.exec(line)[0];
    if (indent === null || m.length < indent.length) indent = m;
  }
  if (!indent) return code;
  return lines.map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l.trim() ? l : "")).join("\n");
}

function compile(code) {
  try {
    return { script: new vm.Script(code, { filename: "cell.js" }), wrapped: false };
  } catch (e) {
    if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e;
    let wrapped = processTopLevelAwait ? processTopLevelAwait(code) : null;
    if (wrapped === null) wrapped = `(async () => { ${code}\n})()`;
    return { script: new vm.Script(wrapped, { filename: "cell.js" }), wrapped: true };
  }
}

function describe(value) {
  const display = {};
  const hook = value !== null && (typeof value === "object" || typeof value === "function") ? value[Symbol.for("Jupyter.display")] : undefined;
  if (typeof hook === "function") {
    const bundle = hook.call(value);
    if (bundle && typeof bundle === "object") {
      for (const [k, v] of Object.entries(bundle)) display[k] = clip(typeof v === "string" ? v : JSONstringify(v));
    }
  }
  if (!("text/plain" in display)) display["text/plain"] = clip(util.inspect(value));
  return display;
}

function errorOf(e) {
  if (e !== null && typeof e === "object" && typeof e.name === "string") {
    const stack = typeof e.stack === "string" ? e.stack : "";
    return { name: e.name, message: clip(String(e.message ?? "")), traceback: clip(stack || `${e.name}: ${e.message}`) };
  }
  const text = util.inspect(e);
  return { name: typeof e, message: clip(text), traceback: clip("Uncaught " + text) };
}

async function run(req) {
  const saved = {};
  for (const [k, v] of Object.entries(req.env || {})) {
    saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined;
    process.env[k] = v;
  }
  try {
    let code = dedent(String(req.code || ""));
    if (req.lang === "typescript") code = stripTypes(code);
    code = esmToCommonJS(code);
    const { script, wrapped } = compile(code);
    let value = script.runInThisContext({ displayErrors: false });
    if (wrapped) {
      value = await value;
      value = value && typeof value === "object" && "value" in value && processTopLevelAwait ? value.value : value;
    }
    return value === undefined ? {} : { display: describe(value) };
  } catch (e) {
    return { error: errorOf(e) };
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function reply(obj) {
  const line = Buffer.from(JSONstringify(obj) + "\n");
  let off = 0;
  while (off < line.length) off += writeSync(4, line, off);
}

// A rejection or an exception no cell awaits is reported on stderr, as
// Node's REPL does, and the kernel lives on.
process.on("unhandledRejection", (e) => process.stderr.write("Uncaught " + (e && e.stack ? e.stack : util.inspect(e)) + "\n"));
process.on("uncaughtException", (e) => process.stderr.write("Uncaught " + (e && e.stack ? e.stack : util.inspect(e)) + "\n"));

if (process.env.CODECAGE_KERNEL_SELFTEST) {
  // For tests of the transforms outside the jail: stdin in, code out.
  const src = fs.readFileSync(0, "utf8");
  process.stdout.write(esmToCommonJS(stripTypes(src)));
} else {
  delete process.env.CODECAGE_KERNEL_SELFTEST;
  let buffered = "";
  let queue = Promise.resolve();
  const input = fs.createReadStream(null, { fd: 3 });
  input.setEncoding("utf8");
  input.on("data", (chunk) => {
    buffered += chunk;
    let nlAt;
    while ((nlAt = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, nlAt);
      buffered = buffered.slice(nlAt + 1);
      let req;
      try {
        req = JSONparse(line);
      } catch (e) {
        continue;
      }
      queue = queue.then(() => run(req)).then(reply);
    }
  });
  input.on("end", () => process.exit(0));
}
