// Validates rendered Kubernetes manifests against the API schemas of kubernetes-models (and, for
// ServiceMonitors, @kubernetes-models/prometheus-operator).
//
//   NODE_PATH=<dir with node_modules> node scripts/validate-manifests.mjs FILE.yaml...
//
// Every document must map to a known apiVersion/kind: one the models do not know is an error,
// never a skip, so a typo in apiVersion cannot slip through as "unvalidated". Prints one line per
// manifest and exits 1 on any error. scripts/check-helm.sh installs the packages and calls this.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

// ES modules ignore NODE_PATH, so resolve through a require() rooted in the tools' cache.
const roots = (process.env.NODE_PATH || "").split(path.delimiter).filter(Boolean);
if (roots.length === 0) {
  console.error("validate-manifests: set NODE_PATH to the node_modules holding kubernetes-models and yaml");
  process.exit(2);
}
const requireFrom = createRequire(path.join(roots[0], "_resolve_from_here.js"));
const YAML = requireFrom("yaml");

// Packages whose folders are named by apiVersion ("apps/v1", "v1", "monitoring.coreos.com/v1").
const modelPackages = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];
const modules = new Map();

function modelClass(apiVersion, kind) {
  // Only plain group/version strings: a template bug must not turn into a path outside the package.
  if (typeof apiVersion !== "string" || !/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion)) {
    return null;
  }
  for (const pkg of modelPackages) {
    const id = `${pkg}/${apiVersion}`;
    if (!modules.has(id)) {
      try {
        modules.set(id, requireFrom(id));
      } catch {
        modules.set(id, null);
      }
    }
    const mod = modules.get(id);
    const cls = mod && typeof kind === "string" ? mod[kind] : undefined;
    // Some modules also export their definitions (ObjectMeta, ...): only top-level kinds count.
    if (typeof cls === "function" && cls.apiVersion === apiVersion && cls.kind === kind) return cls;
  }
  return null;
}

// --- Unknown fields -------------------------------------------------------------------------
// The models' validate() checks types, enums and required fields, but like the API's OpenAPI
// schemas it lets unknown fields through, so a misspelt field in a template would be dropped by
// the API server without a word. The packages' TypeScript declarations list every field of every
// type, so we read them (a small parser for the subset they use: object literals, index
// signatures, Array<T>, unions, named interfaces imported from other files) and reject any field
// they do not declare, like `kubectl apply --validate=strict` would.
const declFiles = new Map(); // .d.ts path -> { interfaces: Map(name -> type), imports: Map(name -> spec), exports: Map(alias -> local) }

function tokenize(text) {
  const tokens = [];
  const re = /\s+|"(?:[^"\\]|\\.)*"|[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|[{}<>\[\]();:?|,&=.]/gy;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (!/^\s/.test(m[0])) tokens.push(m[0]);
    if (re.lastIndex >= text.length) break;
  }
  return tokens;
}

function parseType(t) {
  const options = [parsePrimary(t)];
  while (t.peek() === "|") {
    t.next();
    options.push(parsePrimary(t));
  }
  return options.length === 1 ? options[0] : { kind: "union", options };
}

function parsePrimary(t) {
  const tok = t.next();
  let type;
  if (tok === "{") {
    type = { kind: "object", props: new Map(), index: null };
    while (t.peek() !== "}") {
      if (t.peek() === "[") { // [key: string]: T;
        t.next(); t.next(); t.expect(":"); t.next(); t.expect("]"); t.expect(":");
        type.index = parseType(t);
      } else {
        const raw = t.next();
        const name = raw.startsWith('"') ? JSON.parse(raw) : raw;
        if (t.peek() === "?") t.next();
        t.expect(":");
        type.props.set(name, parseType(t));
      }
      if (t.peek() === ";" || t.peek() === ",") t.next();
    }
    t.expect("}");
  } else if (tok === "Array" && t.peek() === "<") {
    t.next();
    type = { kind: "array", item: parseType(t) };
    t.expect(">");
  } else if (tok === "(") {
    type = parseType(t);
    t.expect(")");
  } else if (/^[A-Za-z_$]/.test(tok) && !["string", "number", "boolean", "any", "unknown", "null", "object", "true", "false"].includes(tok)) {
    type = { kind: "ref", name: tok };
  } else {
    type = { kind: "any" }; // primitives and literals: validate() checks those
  }
  while (t.peek() === "[" && t.peek(1) === "]") { // T[]
    t.next(); t.next();
    type = { kind: "array", item: type };
  }
  return type;
}

function loadDecl(file) {
  if (declFiles.has(file)) return declFiles.get(file);
  const decl = { file, interfaces: new Map(), imports: new Map(), exports: new Map() };
  declFiles.set(file, decl);
  let text;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return decl;
  }
  text = text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/[^\n]*/g, "");
  for (const m of text.matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    for (const part of m[1].split(",")) {
      const [orig, local] = part.trim().split(/\s+as\s+/);
      if (orig) decl.imports.set((local || orig).trim(), { spec: m[2], name: orig.trim() });
    }
  }
  for (const m of text.matchAll(/export\s*\{([^}]*)\}/g)) {
    for (const part of m[1].split(",")) {
      const [local, alias] = part.trim().split(/\s+as\s+/);
      if (local && alias) decl.exports.set(alias.trim(), local.trim());
    }
  }
  for (const m of text.matchAll(/export\s+interface\s+(\w+)(?:\s+extends\s+[\w<>, ]+)?\s*\{/g)) {
    const tokens = tokenize(text.slice(m.index + m[0].length - 1));
    let i = 0;
    const t = {
      peek: (k = 0) => tokens[i + k],
      next: () => tokens[i++],
      expect: (want) => {
        if (tokens[i] !== want) throw new Error(`${file}: expected ${want}, found ${tokens[i]}`);
        i++;
      },
    };
    try {
      decl.interfaces.set(m[1], parsePrimary(t));
    } catch {
      // A declaration this parser does not follow is simply not checked for unknown fields.
    }
  }
  return decl;
}

function resolveRef(decl, name) {
  const local = decl.exports.get(name) || name;
  if (decl.interfaces.has(local)) return { decl, type: decl.interfaces.get(local) };
  const imp = decl.imports.get(name);
  if (!imp) return null;
  let target;
  if (imp.spec.startsWith(".")) {
    target = path.resolve(path.dirname(decl.file), imp.spec) + ".d.ts";
  } else {
    try {
      target = requireFrom.resolve(imp.spec).replace(/\.(c|m)?js$/, ".d.ts");
    } catch {
      return null;
    }
  }
  return resolveRef(loadDecl(target), imp.name);
}

function unknownFields(value, type, decl, where, out, depth = 0) {
  if (!type || value === null || typeof value !== "object" || depth > 64) return;
  if (type.kind === "ref") {
    const r = resolveRef(decl, type.name);
    if (r) unknownFields(value, r.type, r.decl, where, out, depth + 1);
  } else if (type.kind === "array") {
    if (Array.isArray(value)) value.forEach((v, k) => unknownFields(v, type.item, decl, `${where}[${k}]`, out, depth + 1));
  } else if (type.kind === "union") {
    // Only a union with a single structured member can be followed without guessing.
    const structured = type.options.filter((o) => o.kind !== "any");
    if (structured.length === 1) unknownFields(value, structured[0], decl, where, out, depth + 1);
  } else if (type.kind === "object" && !Array.isArray(value)) {
    for (const [key, v] of Object.entries(value)) {
      const sub = where ? `${where}.${key}` : key;
      if (type.props.has(key)) unknownFields(v, type.props.get(key), decl, sub, out, depth + 1);
      else if (type.index) unknownFields(v, type.index, decl, sub, out, depth + 1);
      else out.push(sub);
    }
  }
}

function declFileFor(apiVersion, kind) {
  for (const pkg of modelPackages) {
    try {
      const file = requireFrom.resolve(`${pkg}/${apiVersion}/${kind}`).replace(/\.(c|m)?js$/, ".d.ts");
      const decl = loadDecl(file);
      for (const [name, type] of decl.interfaces) {
        if (type.kind === "object" && type.props.has("apiVersion") && type.props.has("kind") && name === `I${kind}`) {
          return { decl, type };
        }
      }
    } catch {
      // not in this package
    }
  }
  return null;
}

function describeErrors(err) {
  if (Array.isArray(err?.errors) && err.errors.length > 0) {
    return err.errors
      .map((e) => `${e.instancePath || "/"} ${e.message}${e.params?.additionalProperty ? ` (${e.params.additionalProperty})` : ""}`)
      .join("; ");
  }
  return String(err?.message || err);
}

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: validate-manifests.mjs FILE.yaml...");
  process.exit(2);
}

let ok = 0;
let failed = 0;
const seen = new Map();
for (const file of files) {
  const docs = YAML.parseAllDocuments(readFileSync(file, "utf8"));
  for (const doc of docs) {
    // helm template names the template each document came from; keep it for the messages.
    const comments = `${doc.commentBefore || ""}\n${doc.contents?.commentBefore || ""}`;
    const source = comments.match(/Source: (\S+)/)?.[1] || file;
    if (doc.errors.length > 0) {
      console.log(`FAIL ${source}: YAML: ${doc.errors.map((e) => e.message).join("; ")}`);
      failed++;
      continue;
    }
    const obj = doc.toJS();
    if (obj === null || obj === undefined) continue; // an empty document (a template that rendered nothing)
    const what = `${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"}`;
    const fail = (msg) => {
      console.log(`FAIL ${what} (${obj.apiVersion ?? "no apiVersion"}, ${source}): ${msg}`);
      failed++;
    };
    if (typeof obj !== "object" || Array.isArray(obj)) {
      fail("not a mapping");
      continue;
    }
    const cls = modelClass(obj.apiVersion, obj.kind);
    if (!cls) {
      fail(`no schema for apiVersion ${JSON.stringify(obj.apiVersion)} kind ${JSON.stringify(obj.kind)}`);
      continue;
    }
    if (!obj.metadata?.name) {
      fail("metadata.name is missing");
      continue;
    }
    // Two objects with one kind and name would make the install fail half-way.
    const key = `${obj.apiVersion} ${obj.kind} ${obj.metadata.namespace ?? ""} ${obj.metadata.name}`;
    if (seen.has(key)) {
      fail(`duplicate of the object from ${seen.get(key)}`);
      continue;
    }
    seen.set(key, source);
    // Both checks, so one run shows every problem of a manifest.
    const problems = [];
    try {
      new cls(obj).validate();
    } catch (err) {
      problems.push(describeErrors(err));
    }
    const root = declFileFor(obj.apiVersion, obj.kind);
    if (!root) {
      problems.push("no type declaration to check its fields against");
    } else {
      const unknown = [];
      unknownFields(obj, root.type, root.decl, "", unknown);
      if (unknown.length > 0) problems.push(`unknown field${unknown.length > 1 ? "s" : ""} ${unknown.join(", ")}`);
    }
    if (problems.length > 0) {
      fail(problems.join("; "));
      continue;
    }
    console.log(`ok   ${what} (${obj.apiVersion})`);
    ok++;
  }
}
console.log(`${ok} valid, ${failed} invalid`);
if (ok === 0 && failed === 0) {
  console.log("FAIL no manifests found");
  process.exit(1);
}
process.exit(failed > 0 ? 1 : 0);
