// Validates an OpenAPI document (a file, or stdin) against the official
// OpenAPI JSON schema of its version, and resolves every $ref in it.
import { readFileSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";

const text = readFileSync(process.argv[2] ?? 0, "utf8");
const validator = new Validator();
const res = await validator.validate(JSON.parse(text));
if (!res.valid) {
  console.error("OpenAPI document is not valid:", JSON.stringify(res.errors, null, 2));
  process.exit(1);
}
const doc = JSON.parse(text);
const ops = Object.values(doc.paths).reduce((n, p) => n + Object.keys(p).length, 0);
console.log(`openapi: valid OpenAPI ${validator.version} document, ${Object.keys(doc.paths).length} paths, ${ops} operations`);
