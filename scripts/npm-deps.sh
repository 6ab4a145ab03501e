#!/usr/bin/env bash
# Installs the MCP client test dependencies into tests/mcp/node_modules from the npm registry,
# exactly as pinned by tests/mcp/package-lock.json: the official SDK client
# (@modelcontextprotocol/sdk), the MCP Inspector CLI (@modelcontextprotocol/inspector), and
# the Node.js 22 the Inspector requires (the `node` package; the system node, >= 18, runs the
# SDK client). Installs nodejs and npm with apt when they are missing. Does nothing when
# node_modules is already up to date with the lock file.
set -euo pipefail
cd "$(dirname "$0")/../tests/mcp"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "npm-deps: installing nodejs and npm (apt)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "npm-deps: node and npm are needed (apt-get install nodejs npm)" >&2
    exit 1
  fi
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 18 ]; then
  echo "npm-deps: node $(node --version) is too old for the MCP SDK (>= 18)" >&2
  exit 1
fi

# npm writes node_modules/.package-lock.json at the end of an install: newer than the lock
# file means the tree matches it.
stamp=node_modules/.package-lock.json
if [ -f "$stamp" ] && [ "$stamp" -nt package-lock.json ] &&
  [ -x node_modules/.bin/node ] && [ -x node_modules/.bin/mcp-inspector ] &&
  [ -d node_modules/@modelcontextprotocol/sdk ]; then
  echo "npm-deps: tests/mcp/node_modules is up to date" >&2
  exit 0
fi
echo "npm-deps: npm ci in tests/mcp" >&2
npm ci --no-audit --no-fund --loglevel=error
# The `node` package fetches its platform binary in an install script: check it arrived.
node_modules/.bin/node --version >/dev/null
echo "npm-deps: MCP SDK $(node -p 'require("./node_modules/@modelcontextprotocol/sdk/package.json").version')," \
  "Inspector $(node -p 'require("./node_modules/@modelcontextprotocol/inspector/package.json").version')," \
  "Node.js $(node_modules/.bin/node --version) for the Inspector" >&2
