#!/usr/bin/env bash
# Validates the REST API's OpenAPI document (with and without API keys)
# against the official OpenAPI 3.1 JSON schema (a validator from npm).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
scripts/npm-deps.sh e2e/openapi
scripts/build.sh
bin/codecage openapi | node e2e/openapi/check.mjs
SANDBOX_API_KEYS=doc:0123456789abcdef0123 bin/codecage openapi | node e2e/openapi/check.mjs
