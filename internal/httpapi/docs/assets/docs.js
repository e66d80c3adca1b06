/* API documentation viewer for an OpenAPI 3.1 document.
 *
 * Security rule for this file: text from the spec or from responses is only
 * ever inserted as text nodes or attribute values, never parsed as HTML, so a
 * hostile description cannot inject markup. The page's CSP forbids inline
 * styles too, so all presentation is done with classes from docs.css. */
(function () {
  "use strict";

  const METHODS = ["get", "put", "post", "patch", "delete", "head", "options", "trace"];
  const KEY_STORAGE = "codecage-docs-api-key";
  const main = document.getElementById("content");
  let spec = {};
  let idCounter = 0;

  /* ---------- DOM helpers ---------- */

  // el builds an element. Props become attributes (true: present, false or
  // null: absent); children are nodes or strings, and strings become text
  // nodes. Nested arrays are flattened and null/false children skipped, so
  // callers can use conditionals inline.
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v !== undefined && v !== null && v !== false) node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c !== null && c !== undefined && c !== false) node.append(typeof c === "object" ? c : String(c));
    }
    return node;
  }

  const uid = (prefix) => prefix + "-" + ++idCounter;

  // slug turns arbitrary spec text into a safe, readable fragment id.
  function slug(s) {
    return String(s).toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "") || "x";
  }

  // prose keeps the line structure of a (markdown) description without
  // interpreting it: CSS shows it with white-space: pre-line. A span is used
  // inside <summary>, which may only hold phrasing content.
  function prose(text, tag) {
    return typeof text === "string" && text.trim() ? el(tag || "div", { class: "prose" }, text.trim()) : null;
  }

  const json = (v) => JSON.stringify(v); // values come from parsed JSON, so this cannot throw

  const hasOwn = (o, k) => o !== null && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k);

  /* ---------- $ref resolution ---------- */

  // pointer follows a local JSON pointer such as "#/components/schemas/X".
  // Remote references are not fetched: the page loads nothing but the spec.
  function pointer(ref) {
    if (typeof ref !== "string" || !ref.startsWith("#/")) return undefined;
    let cur = spec;
    for (const raw of ref.slice(2).split("/")) {
      let part;
      try { part = decodeURIComponent(raw); } catch (e) { return undefined; }
      part = part.replace(/~1/g, "/").replace(/~0/g, "~");
      if (!hasOwn(cur, part)) return undefined;
      cur = cur[part];
    }
    return cur;
  }

  // deref resolves a chain of $refs. Keywords next to a $ref override the
  // target (allowed since OpenAPI 3.1). `seen` holds the refs already open on
  // the current branch of a tree: meeting one again means a cycle.
  function deref(obj, seen) {
    const refs = new Set();
    let name = null;
    while (obj && typeof obj === "object" && typeof obj.$ref === "string") {
      const ref = obj.$ref;
      name = name || ref.slice(ref.lastIndexOf("/") + 1);
      if (refs.has(ref) || (seen && seen.has(ref))) return { obj: {}, name, refs, cyclic: true };
      refs.add(ref);
      const target = pointer(ref);
      if (target === undefined) return { obj: {}, name, refs, missing: true };
      const { $ref, ...siblings } = obj;
      obj = { ...target, ...siblings }; // spread, not Object.assign: a "__proto__" key stays data
    }
    return { obj: obj && typeof obj === "object" ? obj : {}, name, refs };
  }

  const extend = (seen, refs) => new Set([...(seen || []), ...refs]);

  /* ---------- schema description ---------- */

  // types lists a schema's types; 3.1 allows ["string","null"], 3.0 used
  // nullable: true, and many schemas omit type but imply it.
  function types(s) {
    const t = Array.isArray(s.type) ? s.type.slice() : typeof s.type === "string" ? [s.type] : [];
    if (s.nullable === true && !t.includes("null")) t.push("null");
    if (!t.length && (s.properties || s.additionalProperties)) t.push("object");
    if (!t.length && s.items) t.push("array");
    return t;
  }

  function typeLabel(schema, seen) {
    const d = deref(schema, seen);
    const s = d.obj;
    const t = types(s);
    if (!t.length) {
      if (s.oneOf) return "one of";
      if (s.anyOf) return "any of";
      if (s.allOf) return d.name || "all of";
      if (s.const !== undefined) return "const";
      if (Array.isArray(s.enum) && s.enum.length) return typeof s.enum[0];
      return d.name || "any";
    }
    return t.map((x) => {
      if (x !== "array") return x === "object" && d.name ? d.name : x;
      if (!s.items || d.cyclic) return "array";
      const item = typeLabel(s.items, extend(seen, d.refs));
      return (/[ |]/.test(item) ? "(" + item + ")" : item) + "[]";
    }).join(" | ");
  }

  // facts lists what a reader needs beyond the type: description, allowed
  // values, default, example and validation limits.
  function facts(s, omitDescription) {
    const out = [];
    const fact = (label, value) => out.push(el("span", { class: "fact" }, el("span", { class: "fact-k" }, label + ": "), el("code", {}, value)));
    if (Array.isArray(s.enum)) fact("one of", s.enum.map(json).join(", "));
    if (s.const !== undefined) fact("const", json(s.const));
    if (s.default !== undefined) fact("default", json(s.default));
    if (s.example !== undefined) fact("example", json(s.example));
    else if (Array.isArray(s.examples) && s.examples.length) fact("example", json(s.examples[0]));
    const limits = [["minimum", "≥"], ["exclusiveMinimum", ">"], ["maximum", "≤"], ["exclusiveMaximum", "<"],
      ["minLength", "min length"], ["maxLength", "max length"], ["minItems", "min items"], ["maxItems", "max items"],
      ["multipleOf", "multiple of"], ["pattern", "pattern"]];
    for (const [k, label] of limits) if (typeof s[k] === "number" || typeof s[k] === "string") fact(label, String(s[k]));
    if (s.uniqueItems === true) fact("items", "unique");
    if (s.additionalProperties === false) fact("other properties", "not allowed");
    const desc = omitDescription ? null : prose(s.description || s.title, "span");
    return el("span", { class: "facts" }, desc, out.length ? el("span", { class: "fact-list" }, out) : null);
  }

  function flags(s, required) {
    return [
      required ? el("span", { class: "flag req", title: "required" }, "required") : null,
      s.readOnly ? el("span", { class: "flag" }, "read-only") : null,
      s.writeOnly ? el("span", { class: "flag" }, "write-only") : null,
      s.deprecated ? el("span", { class: "flag warn" }, "deprecated") : null,
    ];
  }

  // schemaTree renders one schema as a list item. Nodes with children are
  // <details>, so the tree collapses by keyboard too; children of collapsed
  // nodes are built when first opened, which keeps big schema graphs cheap.
  function schemaTree(schema, label, required, seen, depth) {
    const d = deref(schema, seen);
    const s = d.obj;
    const head = el("span", { class: "node-head" },
      label !== null ? el("code", { class: "pname" }, label) : null,
      el("span", { class: "type" }, typeLabel(schema, seen)),
      s.format ? el("span", { class: "format" }, s.format) : null,
      flags(s, required),
      d.cyclic ? el("span", { class: "flag" }, "recursive: " + d.name) : null,
      d.missing ? el("span", { class: "flag warn" }, "unresolved $ref") : null);
    const next = extend(seen, d.refs);
    const kids = d.cyclic ? [] : children(s, next);
    if (!kids.length) return el("li", { class: "node leaf" }, head, facts(s));
    const list = el("ul", { class: "tree" });
    const fill = () => list.firstChild || list.append(...kids.map(([c, l, r]) => schemaTree(c, l, r, next, depth + 1)));
    const det = el("details", { open: depth < 2 }, el("summary", {}, head, facts(s)), list);
    if (depth < 2) fill();
    else det.addEventListener("toggle", fill);
    return el("li", { class: "node" }, det);
  }

  // children lists a schema's sub-schemas as [schema, label, required].
  function children(s, seen) {
    const out = [];
    const req = Array.isArray(s.required) ? s.required : [];
    if (s.properties && typeof s.properties === "object") {
      for (const [k, v] of Object.entries(s.properties)) out.push([v, k, req.includes(k)]);
    }
    if (s.additionalProperties && typeof s.additionalProperties === "object") out.push([s.additionalProperties, "{any key}", false]);
    if (s.items && typeof s.items === "object" && types(s).includes("array")) {
      // Only expand items that have structure; "string[]" says it all.
      const it = deref(s.items, seen).obj;
      if (structured(it) || it.description || it.enum) out.push([s.items, "[item]", false]);
    }
    for (const [kw, word] of [["allOf", "all of"], ["oneOf", "one of"], ["anyOf", "any of"]]) {
      if (Array.isArray(s[kw])) s[kw].forEach((v, i) => out.push([v, word + " #" + (i + 1), false]));
    }
    return out;
  }

  function structured(s) {
    return (s.properties && Object.keys(s.properties).length > 0) || typeof s.additionalProperties === "object" ||
      typeof s.items === "object" || ["allOf", "oneOf", "anyOf"].some((k) => Array.isArray(s[k]));
  }

  function schemaBlock(schema) {
    return el("ul", { class: "tree root" }, schemaTree(schema, null, false, new Set(), 0));
  }

  // sample builds a starting value for a request body: the schema's example
  // or default when it has one, otherwise a skeleton of its required
  // properties. Cycles and deep nesting end in null.
  function sample(schema, seen, depth) {
    const d = deref(schema, seen);
    const s = d.obj;
    if (d.cyclic || d.missing || depth > 10) return null;
    if (s.example !== undefined) return s.example;
    if (Array.isArray(s.examples) && s.examples.length) return s.examples[0];
    if (s.default !== undefined) return s.default;
    if (s.const !== undefined) return s.const;
    if (Array.isArray(s.enum) && s.enum.length) return s.enum[0];
    const next = extend(seen, d.refs);
    if (Array.isArray(s.allOf)) {
      // Null-prototype objects keep a "__proto__" property name as data.
      return s.allOf.reduce((acc, v) => {
        const x = sample(v, next, depth + 1);
        return x && typeof x === "object" && !Array.isArray(x) ? Object.assign(acc, x) : acc;
      }, Object.create(null));
    }
    const alt = s.oneOf || s.anyOf;
    if (Array.isArray(alt) && alt.length) {
      return sample(alt.find((v) => !types(deref(v, next).obj).includes("null")) || alt[0], next, depth + 1);
    }
    const t = types(s);
    switch (t.filter((x) => x !== "null")[0]) {
      case "object": {
        const o = Object.create(null);
        for (const k of Array.isArray(s.required) ? s.required : []) {
          const prop = hasOwn(s.properties, k) ? s.properties[k] : {};
          if (!deref(prop, next).obj.readOnly) o[k] = sample(prop, next, depth + 1); // the server sets read-only ones
        }
        return o;
      }
      case "array": return s.minItems > 0 && s.items ? [sample(s.items, next, depth + 1)] : [];
      case "string": return "";
      case "integer": case "number": return typeof s.minimum === "number" ? s.minimum : 0;
      case "boolean": return false;
      default: return t.includes("null") ? null : {};
    }
  }

  /* ---------- operations ---------- */

  function collectGroups() {
    const groups = new Map();
    for (const t of Array.isArray(spec.tags) ? spec.tags : []) {
      if (t && typeof t.name === "string") groups.set(t.name, { name: t.name, description: t.description, ops: [] });
    }
    for (const [path, rawItem] of Object.entries(spec.paths || {})) {
      const item = deref(rawItem).obj;
      for (const method of METHODS) {
        const op = item[method];
        if (!op || typeof op !== "object") continue;
        // An operation is listed once, under its first tag (or its path).
        const tag = Array.isArray(op.tags) && typeof op.tags[0] === "string" ? op.tags[0] : path;
        if (!groups.has(tag)) groups.set(tag, { name: tag, ops: [] });
        groups.get(tag).ops.push({ path, method, op, item });
      }
    }
    return [...groups.values()].filter((g) => g.ops.length);
  }

  // params merges path-level and operation-level parameters; the operation
  // wins for the same name and location, as OpenAPI specifies.
  function params(o) {
    const byKey = new Map();
    for (const p of [...(o.item.parameters || []), ...(o.op.parameters || [])]) {
      const r = deref(p).obj;
      if (typeof r.name === "string" && typeof r.in === "string") byKey.set(r.in + ":" + r.name, r);
    }
    return [...byKey.values()];
  }

  function paramSchema(p) {
    if (p.schema) return p.schema;
    const media = p.content && Object.values(p.content)[0];
    return (media && media.schema) || {};
  }

  function paramTable(list) {
    return el("table", { class: "params" },
      el("thead", {}, el("tr", {}, ["Name", "In", "Type", "Description"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, list.map((p) => {
        const s = deref(paramSchema(p)).obj;
        return el("tr", {},
          el("td", {}, el("code", { class: "pname" }, p.name), p.required ? el("span", { class: "flag req" }, "required") : null),
          el("td", {}, p.in),
          el("td", {}, el("span", { class: "type" }, typeLabel(paramSchema(p))), s.format ? [" ", el("span", { class: "format" }, s.format)] : null),
          el("td", {}, prose(p.description), p.deprecated ? el("span", { class: "flag warn" }, "deprecated") : null,
            facts(s, Boolean(p.description)))); // the parameter's own description wins
      })));
  }

  function contentBlocks(content) {
    return Object.entries(content || {}).map(([type, media]) => el("div", { class: "media" },
      el("div", { class: "media-type" }, "Content type ", el("code", {}, type)),
      media && media.schema ? schemaBlock(media.schema) : el("p", { class: "muted" }, "No schema.")));
  }

  function statusClass(code) {
    const c = String(code)[0];
    return ["2", "3", "4", "5"].includes(c) ? "s" + c + "xx" : "sdefault";
  }

  function responses(op) {
    return Object.entries(op.responses || {}).map(([code, raw], i) => {
      const r = deref(raw).obj;
      const hdrs = Object.keys(r.headers || {});
      return el("details", { class: "response", open: i === 0 },
        el("summary", {}, el("span", { class: "status-code " + statusClass(code) }, code), " ", el("span", {}, r.description || "")),
        hdrs.length ? el("p", { class: "muted" }, "Headers: ", hdrs.map((h, j) => [j ? ", " : "", el("code", {}, h)])) : null,
        contentBlocks(r.content));
    });
  }

  function jsonMedia(content) {
    const key = Object.keys(content || {}).find((k) => /^application\/([\w.+-]*\+)?json\b/i.test(k));
    return key ? { type: key, media: content[key] || {} } : null;
  }

  // opBody is built the first time an operation is opened: large specs stay
  // fast because collapsed operations cost only their summary line.
  function opBody(o) {
    const { op } = o;
    const ps = params(o);
    const body = deref(op.requestBody).obj;
    const hasBody = Object.keys(body).length > 0;
    return el("div", { class: "op-body" },
      prose(op.description),
      op.operationId ? el("p", { class: "muted" }, "Operation ID ", el("code", {}, op.operationId)) : null,
      ps.length ? [el("h4", {}, "Parameters"), paramTable(ps)] : null,
      hasBody ? [el("h4", {}, "Request body", body.required ? el("span", { class: "flag req" }, "required") : null),
        prose(body.description), contentBlocks(body.content)] : null,
      op.responses ? [el("h4", {}, "Responses"), responses(op)] : null,
      tryIt(o, ps, hasBody ? body : null));
  }

  const usedIds = new Set();
  const builders = new WeakMap(); // operation <details> -> builds its body once

  function renderOp(o) {
    let id = "op-" + slug(o.op.operationId || o.method + "-" + o.path);
    if (usedIds.has(id)) id = uid(id);
    usedIds.add(id);
    const summary = typeof o.op.summary === "string" ? o.op.summary : "";
    const det = el("details", { class: "op", id },
      el("summary", {},
        el("span", { class: "method m-" + o.method }, o.method.toUpperCase()),
        el("code", { class: "path" }, o.path),
        el("span", { class: "op-summary" }, summary),
        o.op.deprecated ? el("span", { class: "flag warn" }, "deprecated") : null));
    det.dataset.search = [o.method, o.path, summary, o.op.operationId || ""].join(" ").toLowerCase();
    let built = false;
    const build = () => {
      if (!built) { built = true; det.append(opBody(o)); }
    };
    builders.set(det, build);
    det.addEventListener("toggle", () => det.open && build());
    return det;
  }

  /* ---------- Try it ---------- */

  const apiKey = () => document.getElementById("apikey").value.trim();

  function initialValue(p) {
    const s = deref(paramSchema(p)).obj;
    const v = p.example !== undefined ? p.example : s.example !== undefined ? s.example : s.default;
    return v === undefined || v === null ? "" : Array.isArray(v) ? v.join(",") : String(v);
  }

  function paramInput(p) {
    const id = uid("in");
    const s = deref(paramSchema(p)).obj;
    let input;
    if (Array.isArray(s.enum) && s.enum.length) {
      // A select offers exactly the allowed values; "" leaves it unset.
      input = el("select", { id }, p.required ? null : el("option", { value: "" }, "(not set)"),
        s.enum.map((v) => el("option", { value: String(v) }, String(v))));
    } else {
      input = el("input", { id, type: "text", spellcheck: "false", autocomplete: "off", placeholder: typeLabel(paramSchema(p)) });
    }
    const initial = initialValue(p);
    if (initial !== "") input.value = initial; // else a required select keeps its first value
    const field = el("div", { class: "field" },
      el("label", { for: id }, el("code", {}, p.name), " ", el("span", { class: "hint" }, p.in + (p.required ? ", required" : ""))),
      input);
    return { p, input, field, isArray: types(s).includes("array") };
  }

  // buildURL fills path templates and the query string. Requests always go
  // to this origin (the CSP allows nothing else); a relative or same-origin
  // server URL in the spec supplies a path prefix.
  function buildURL(path, fields) {
    let prefix = "";
    const server = Array.isArray(spec.servers) && spec.servers[0] && spec.servers[0].url;
    if (typeof server === "string") {
      try {
        // Relative server URLs are relative to the OpenAPI document.
        const u = new URL(server, new URL(main.dataset.spec, location.href));
        if (u.origin === location.origin) prefix = u.pathname.replace(/\/+$/, "");
      } catch (e) { /* unusable server URL: use the path as is */ }
    }
    const query = new URLSearchParams();
    const missing = [];
    let filled = path;
    for (const f of fields) {
      const v = f.input.value;
      if (f.p.in === "path") {
        if (v === "") missing.push(f.p.name);
        filled = filled.split("{" + f.p.name + "}").join(encodeURIComponent(v));
      } else if (f.p.in === "query" && v !== "") {
        // Arrays use the default form/explode style: ?a=1&a=2.
        for (const part of f.isArray ? v.split(",") : [v]) query.append(f.p.name, part.trim());
      }
    }
    if (missing.length) throw new Error("Missing path parameter: " + missing.join(", "));
    const qs = query.toString();
    return prefix + filled + (qs ? "?" + qs : "");
  }

  function tryIt(o, ps, body) {
    const fields = ps.filter((p) => ["path", "query", "header"].includes(p.in)).map(paramInput);
    const bodyMedia = body && jsonMedia(body.content);
    let textarea = null;
    if (bodyMedia) {
      const m = bodyMedia.media;
      let initial = m.example;
      if (initial === undefined && m.examples && typeof m.examples === "object") {
        const first = Object.values(m.examples).map((e) => deref(e).obj)[0];
        if (first) initial = first.value;
      }
      if (initial === undefined) initial = m.schema ? sample(m.schema, new Set(), 0) : {};
      textarea = el("textarea", { id: uid("body"), rows: 8, spellcheck: "false", class: "code" });
      textarea.value = JSON.stringify(initial, null, 2);
    }
    const send = el("button", { type: "submit", class: "primary" }, "Send request");
    const cancel = el("button", { type: "button", disabled: true }, "Cancel");
    const result = el("div", { class: "result", "aria-live": "polite" });
    let controller = null;
    cancel.addEventListener("click", () => controller && controller.abort());

    const form = el("form", { class: "try", novalidate: true },
      el("h4", {}, "Try it"),
      fields.length ? el("div", { class: "fields" }, fields.map((f) => f.field)) : null,
      textarea ? el("div", { class: "field" },
        el("label", { for: textarea.id }, "Request body ", el("span", { class: "hint" }, bodyMedia.type)), textarea) : null,
      el("div", { class: "actions" }, send, cancel),
      result);

    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      result.replaceChildren();
      controller = new AbortController();
      send.disabled = true;
      cancel.disabled = false;
      try {
        await execute(o, fields, textarea, bodyMedia, controller.signal, result);
      } catch (e) {
        const aborted = e && e.name === "AbortError";
        result.append(el("p", { class: aborted ? "status" : "status error" }, aborted ? "Request cancelled." : String(e && e.message ? e.message : e)));
      } finally {
        send.disabled = false;
        cancel.disabled = true;
        controller = null;
      }
    });
    return form;
  }

  async function execute(o, fields, textarea, bodyMedia, signal, result) {
    const url = buildURL(o.path, fields);
    const headers = new Headers();
    // Ask for what the operation says it returns, so content negotiation
    // (JSON vs. an event stream) picks the documented representation.
    const accept = new Set();
    for (const r of Object.values(o.op.responses || {})) Object.keys(deref(r).obj.content || {}).forEach((t) => accept.add(t));
    headers.set("Accept", accept.size ? [...accept].join(", ") : "*/*");
    for (const f of fields) if (f.p.in === "header" && f.input.value !== "") headers.set(f.p.name, f.input.value);
    if (apiKey()) headers.set("Authorization", "Bearer " + apiKey());
    const init = { method: o.method.toUpperCase(), headers, signal, credentials: "same-origin", cache: "no-store" };
    if (textarea && textarea.value.trim() !== "" && !["GET", "HEAD"].includes(init.method)) {
      try { JSON.parse(textarea.value); } catch (e) { throw new Error("The request body is not valid JSON: " + e.message); }
      init.body = textarea.value;
      headers.set("Content-Type", bodyMedia.type);
    }
    const started = performance.now();
    result.append(el("p", { class: "status" }, init.method + " " + url + " …"));
    const res = await fetch(url, init);
    const ms = Math.round(performance.now() - started);
    const statusLine = el("p", { class: "status-line" },
      el("span", { class: "status-code " + statusClass(res.status) }, String(res.status)), " ",
      res.statusText || "", el("span", { class: "muted" }, " · " + ms + " ms"));
    const headerList = el("dl", { class: "headers" });
    res.headers.forEach((v, k) => headerList.append(el("dt", {}, k), el("dd", {}, v)));
    const type = (res.headers.get("content-type") || "").toLowerCase();
    const stream = type.startsWith("text/event-stream") && res.body;
    const out = el(stream ? "div" : "pre", { class: stream ? "events" : "code response-body", tabindex: "0" });
    result.replaceChildren(statusLine, el("details", { class: "resp-headers" }, el("summary", {}, "Response headers"), headerList), out);
    if (stream) await readEvents(res.body, out);
    else out.textContent = pretty(await res.text(), type) || "(empty body)";
  }

  function pretty(text, type) {
    if (type.includes("json") || /^\s*[[{]/.test(text)) {
      try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON after all */ }
    }
    return text;
  }

  // readEvents reads a text/event-stream incrementally and appends each
  // event as it arrives, so long-running executions show progress live.
  async function readEvents(stream, out) {
    const reader = stream.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    let count = 0;
    const flush = (block) => {
      let event = "message", id = null;
      const data = [];
      for (const line of block.split(/\r\n|\r|\n/)) {
        if (line === "" || line.startsWith(":")) continue; // comments are keep-alives
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
        else if (field === "id") id = value;
      }
      if (!data.length && event === "message") return;
      count += 1;
      out.append(el("div", { class: "event" },
        el("div", { class: "event-head" }, el("span", { class: "flag" }, event), id !== null ? el("span", { class: "muted" }, " id " + id) : null),
        el("pre", { class: "code" }, pretty(data.join("\n"), ""))));
    };
    for (;;) {
      const { value, done } = await reader.read();
      buf += decoder.decode(value || new Uint8Array(), { stream: !done });
      const blocks = buf.split(/\r\n\r\n|\n\n|\r\r/);
      buf = done ? "" : blocks.pop();
      blocks.forEach(flush);
      if (done) break;
    }
    out.append(el("div", { class: "muted" }, "Stream ended after " + count + " event" + (count === 1 ? "" : "s") + "."));
  }

  /* ---------- page ---------- */

  function renderIntro() {
    const info = spec.info || {};
    const title = typeof info.title === "string" && info.title ? info.title : "API documentation";
    document.title = title + " · API documentation";
    document.getElementById("title").textContent = title;
    // Through el(): Element.append would turn a null child into "null" text.
    document.getElementById("meta").append(el("span", { class: "chips-inner" },
      info.version ? el("span", { class: "chip" }, "version " + info.version) : null,
      spec.openapi ? el("span", { class: "chip" }, "OpenAPI " + spec.openapi) : null,
      el("a", { class: "chip link", href: main.dataset.spec }, "Raw JSON")));
    document.getElementById("intro").append(el("div", {}, prose(info.description)));
  }

  function renderGroups(groups) {
    const toc = el("ul", {});
    const container = document.getElementById("groups");
    for (const g of groups) {
      const id = uid("group-" + slug(g.name));
      g.link = el("li", {}, el("a", { href: "#" + id }, g.name, " ", el("span", { class: "count" }, String(g.ops.length))));
      g.section = el("section", { class: "group", id, "aria-labelledby": id + "-h" },
        el("h2", { id: id + "-h" }, g.name), prose(g.description), g.ops.map(renderOp));
      toc.append(g.link);
      container.append(g.section);
    }
    document.getElementById("toc").append(el("h2", { class: "toc-h" }, "Groups"), toc);
    return groups;
  }

  // filter hides operations whose method, path, summary or operation ID do
  // not contain every word typed, and empty groups with them.
  function filter(groups, query) {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    for (const g of groups) {
      let visible = 0;
      for (const op of g.section.querySelectorAll("details.op")) {
        const match = words.every((w) => op.dataset.search.includes(w));
        op.hidden = !match;
        if (match) visible += 1;
      }
      g.section.hidden = g.link.hidden = visible === 0;
      shown += visible;
    }
    const status = document.getElementById("status");
    status.hidden = shown > 0;
    status.textContent = shown > 0 ? "" : "No operation matches “" + query + "”.";
  }

  function setupKey() {
    const input = document.getElementById("apikey");
    // The key sits in a form only so browsers treat it as a password field;
    // pressing Enter there must not submit anything.
    document.getElementById("keyform").addEventListener("submit", (ev) => ev.preventDefault());
    // sessionStorage: the key survives reloads but not closing the tab, and
    // access can throw when storage is disabled, which is not fatal.
    try { input.value = sessionStorage.getItem(KEY_STORAGE) || ""; } catch (e) { /* storage unavailable */ }
    input.addEventListener("input", () => {
      try {
        if (input.value) sessionStorage.setItem(KEY_STORAGE, input.value);
        else sessionStorage.removeItem(KEY_STORAGE);
      } catch (e) { /* storage unavailable */ }
    });
  }

  function openFromHash() {
    let id;
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
    const target = id && document.getElementById(id);
    if (!target) return;
    // Build the body now rather than in the (later) toggle event: until it
    // exists the page may be too short to scroll the target to the top.
    if (builders.has(target)) builders.get(target)();
    if (target.tagName === "DETAILS") target.open = true;
    target.scrollIntoView();
  }

  async function start() {
    setupKey();
    const status = document.getElementById("status");
    const url = main.dataset.spec;
    try {
      const res = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!res.ok) throw new Error("HTTP " + res.status + " " + res.statusText);
      spec = await res.json();
      if (!spec || typeof spec !== "object") throw new Error("the document is not a JSON object");
    } catch (e) {
      status.classList.add("error");
      status.textContent = "Could not load the API description from " + url + ": " + (e && e.message ? e.message : e);
      return;
    }
    status.textContent = "";
    status.hidden = true;
    renderIntro();
    const groups = renderGroups(collectGroups());
    if (!groups.length) {
      status.hidden = false;
      status.textContent = "The API description lists no operations.";
    }
    const search = document.getElementById("search");
    search.addEventListener("input", () => filter(groups, search.value));
    if (search.value) filter(groups, search.value);
    window.addEventListener("hashchange", openFromHash);
    openFromHash();
  }

  start();
})();
