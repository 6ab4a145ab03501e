#!/usr/bin/env bash
# Drives `cae mcp` with the MCP Inspector CLI (@modelcontextprotocol/inspector --cli):
# tools/list, and tools/call of the command, exec, editor and environment tools, checking
# the results, isError, and that a protocol error makes the Inspector fail; prompts/list and
# prompts/get against `cae prompt` byte for byte, for two configurations.
# usage: tests/mcp/inspector-cli.sh /path/to/cae
# Needs tests/mcp/node_modules (scripts/npm-deps.sh), which brings the Node.js the Inspector
# requires (>= 22) as node_modules/.bin/node.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cae=$(readlink -f "${1:?usage: inspector-cli.sh /path/to/cae}")
if [ ! -x "$here/node_modules/.bin/mcp-inspector" ] || [ ! -x "$here/node_modules/.bin/node" ]; then
  echo "inspector-cli: tests/mcp/node_modules is missing: run scripts/npm-deps.sh" >&2
  exit 1
fi
export PATH="$here/node_modules/.bin:$PATH"
export CAE_LOG_LEVEL=${CAE_LOG_LEVEL:-error}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ws=$tmp/ws
mkdir -p "$ws" "$tmp/state"
printf 'hello from the workspace\n' >"$ws/hello.txt"

passed=0
failed=0
n=0
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  n=$((n + 1))
  if "$@"; then
    passed=$((passed + 1))
    echo "ok $n - $what"
  else
    failed=$((failed + 1))
    echo "not ok $n - $what"
    echo "# output: $(head -c 800 "$tmp/out")"
    echo "# stderr: $(head -c 800 "$tmp/err")"
  fi
}

# inspector ARGS...: runs the Inspector CLI against `cae mcp` (with $CAE_CONFIG when set: the
# Inspector does not pass its environment on); output in $tmp/out, status in $rc.
inspector() {
  (cd "$here" && npx --no-install @modelcontextprotocol/inspector --cli -e "CAE_LOG_LEVEL=$CAE_LOG_LEVEL" "$@" -- \
    "$cae" mcp --workspace "$ws" --backend local --state-dir "$tmp/state" ${CAE_CONFIG:+--config "$CAE_CONFIG"}) \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

# json_ok EXPRESSION: evaluates a JavaScript expression over the parsed output `r`.
json_ok() {
  node -e '
    const fs = require("fs");
    let r;
    try { r = JSON.parse(fs.readFileSync(process.argv[1], "utf8")); } catch { process.exit(1); }
    const text = (r.content || []).map((c) => c.text || "").join("\n");
    process.exit((0, eval)(`(r, text) => (${process.argv[2]})`)(r, text) ? 0 : 1);
  ' "$tmp/out" "$1"
}

inspector --method tools/list
check "tools/list succeeds" test "$rc" -eq 0
for t in command-executor_execute_command exec_command text_editor apply_patch environment_list \
  environment_prepare environment_cleanup; do
  check "tools/list offers $t" json_ok "r.tools.some((t) => t.name === '$t' && t.inputSchema.type === 'object')"
done

inspector --method tools/call --tool-name command-executor_execute_command \
  --tool-arg 'command=echo inspector-ok && cat hello.txt'
check "execute_command runs" json_ok "r.isError === false && r.structuredContent.exit_code === 0"
check "execute_command output" json_ok "r.structuredContent.stdout === 'inspector-ok\\nhello from the workspace\\n'"

inspector --method tools/call --tool-name exec_command --tool-arg "cwd=/workspace/project" \
  'command=["sh","-c","printf exec-ok"]'
check "exec_command with an array argument" json_ok "r.isError === false && r.structuredContent.stdout === 'exec-ok'"

inspector --method tools/call --tool-name text_editor --tool-arg command=view --tool-arg path=hello.txt
check "text_editor view" json_ok "r.isError === false && text.includes('hello from the workspace')"

inspector --method tools/call --tool-name text_editor --tool-arg command=view --tool-arg path=missing.txt
check "text_editor view of a missing file is isError" json_ok "r.isError === true"

inspector --method tools/call --tool-name environment_list
check "environment_list" json_ok "r.isError === false && Array.isArray(r.structuredContent.environments)"

inspector --method tools/call --tool-name no_such_tool
check "an unknown tool is a protocol error (the Inspector fails)" test "$rc" -ne 0
check "the error names the unknown tool" grep -q "no_such_tool" "$tmp/out" "$tmp/err"

# The prompts are what `cae prompt` prints for the same configuration and arguments.
cat >"$tmp/custom.yaml" <<'EOF'
command_executor:
  allowed_commands:
    additional: [frobnicate]
  environments:
    go: example/go:1
  default_environment: go
text_editor_mcp:
  enabled: false
EOF
printf '' >"$tmp/default.yaml"
cae_prompt() { "$cae" prompt "$@" --backend local --state-dir "$tmp/state"; }
for cfg in default custom; do
  export CAE_CONFIG=$tmp/$cfg.yaml
  cae_prompt --list >"$tmp/want-list.json"
  inspector --method prompts/list
  check "$cfg: prompts/list succeeds" test "$rc" -eq 0
  check "$cfg: prompts/list is cae prompt --list" json_ok \
    "JSON.stringify(r.prompts) === JSON.stringify(JSON.parse(require('fs').readFileSync('$tmp/want-list.json', 'utf8')))"
  names="command-executor environment-selection"
  [ "$cfg" = default ] && names="$names text-editor"
  for name in $names; do
    cae_prompt "$name" >"$tmp/want.txt"
    inspector --method prompts/get --prompt-name "$name"
    check "$cfg: prompts/get $name is cae prompt $name" json_ok \
      "r.messages.length === 1 && r.messages[0].role === 'user' && r.messages[0].content.text === require('fs').readFileSync('$tmp/want.txt', 'utf8')"
  done
  if [ "$cfg" = default ]; then
    cae_prompt text-editor --arg branch=topic/inspector >"$tmp/want.txt"
    inspector --method prompts/get --prompt-name text-editor --prompt-args branch=topic/inspector
    check "$cfg: prompts/get with an argument is cae prompt --arg" json_ok \
      "r.messages[0].content.text === require('fs').readFileSync('$tmp/want.txt', 'utf8') && r.messages[0].content.text.includes('origin topic/inspector')"
  else
    cae_prompt command-executor >"$tmp/want.txt"
    check "$cfg: the configured allow-list" grep -q frobnicate "$tmp/want.txt"
    inspector --method prompts/get --prompt-name text-editor
    check "$cfg: a disabled section is not served (the Inspector fails)" test "$rc" -ne 0
  fi
  inspector --method prompts/get --prompt-name no-such-prompt
  check "$cfg: an unknown prompt is a protocol error (the Inspector fails)" test "$rc" -ne 0
  check "$cfg: the error names the unknown prompt" grep -q "no-such-prompt" "$tmp/out" "$tmp/err"
done
unset CAE_CONFIG

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
