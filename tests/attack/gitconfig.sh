#!/usr/bin/env bash
# .git/config plants nothing that runs outside the environment: with a workspace the user owns
# (`cae mcp --workspace DIR`, the local backend), what a command, the text editor or a patch
# writes into .git/config never runs in the user's own git on the host
# (src/backend/gitconfig-guard.c). Run as root, as CI runs it.
#
#   tests/attack/gitconfig.sh [path/to/cae]        (default: build/cae)
#
# The workspace is a clone (from a git daemon on 127.0.0.1) owned by a user of its own, with
# settings of that user's (an alias with '!', core.editor, user.name). Through each channel
# (exec_command, process_start, text_editor, apply_patch) the agent plants core.fsmonitor, core.hooksPath,
# an alias with '!', include.path, a clean filter, diff.external and credential.helper; then,
# as the owner on the host, `git status`, `git diff`, `git commit`, `git log`, the aliases and
# `git credential fill` run in the workspace and no marker file appears; the user's own
# settings still work. Last, an agent's ordinary git (`git config user.name`, `git checkout
# -b`, `git remote add`, `git push -u` to the daemon, `git branch --set-upstream-to`) works
# and its settings are there for the host's git afterwards.
# Prints "ok N - ..." / "not ok N - ..." and ends with "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CAE=$(realpath "${1:-$here/../../build/cae}")
[ -n "${CAE_HELPER:-}" ] || export CAE_HELPER="$(dirname "$CAE")/cae-helper"
[ "$(id -u)" = 0 ] || { echo "gitconfig.sh: run as root (as CI does)"; exit 1; }

mkdir -p /var/tmp
work=$(mktemp -d /var/tmp/cae-gitconfig-XXXXXX)
chmod 755 "$work"
OWNER=100321
daemon_pid=
cleanup() {
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

passed=0 failed=0 n=0
ok() { n=$((n + 1)); passed=$((passed + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && printf '#   %s\n' "$2" | head -30; }
check() { # name, condition (shell), detail
	if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi
}

export CAE_STATE_DIR=$work/state
unset CAE_LOG_LEVEL
cat > "$work/config.yaml" <<YAML
command_executor:
  backend: local
  local:
    network: true
YAML
export CAE_CONFIG=$work/config.yaml

# the owner's git on the host: their uid, a home of their own, nothing else
ws=$work/ws
mkdir -p "$work/owner-home"
chown "$OWNER:$OWNER" "$work/owner-home"
owner() {
	setpriv --reuid="$OWNER" --regid="$OWNER" --clear-groups \
		env -i HOME="$work/owner-home" PATH=/usr/bin:/bin GIT_TERMINAL_PROMPT=0 "$@"
}
ogit() { owner git -C "$ws" "$@"; }

# a loopback git server (git daemon, push enabled) with repository r.git
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/srv"
git init -q --bare -b main "$work/srv/r.git"
git -C "$work/srv" clone -q r.git first 2>/dev/null
echo one > "$work/srv/first/file.txt"
git -C "$work/srv/first" add file.txt
git -C "$work/srv/first" -c user.name=t -c user.email=t@t commit -qm one
git -C "$work/srv/first" push -q origin HEAD:main
git daemon --reuseaddr --listen=127.0.0.1 --port="$port" --base-path="$work/srv" \
	--export-all --enable=receive-pack "$work/srv" 2>/dev/null &
daemon_pid=$!
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done


mkdir "$ws" && chown "$OWNER:$OWNER" "$ws"
owner git clone -q "git://127.0.0.1:$port/r.git" "$ws"
ogit config user.name "Owner Person"
ogit config user.email owner@example.com
ogit config alias.own '!echo own-alias-ok'
ogit config core.editor true
# what the agent made before (its files in the workspace; they run nothing by themselves)
mkdir -p "$ws/evilhooks"
printf '#!/bin/sh\ntouch pwned-hook\n' > "$ws/evilhooks/pre-commit"
chmod +x "$ws/evilhooks/pre-commit"
printf '[alias]\n\tinc = "!f() { touch pwned-include; }; f"\n' > "$ws/evil.cfg"
echo '*.txt filter=evil' > "$ws/.gitattributes"
chown -R "$OWNER:$OWNER" "$ws"

# The planted configuration (git config syntax), by every channel.
read -r -d '' PLANT <<'CFG'
[core]
	fsmonitor = "f() { touch pwned-fsmonitor; }; f"
	hooksPath = evilhooks
[alias]
	st2 = "!f() { touch pwned-alias; }; f"
[include]
	path = ../evil.cfg
[filter "evil"]
	clean = "f() { touch pwned-filter; cat; }; f"
[diff]
	external = "f() { touch pwned-diffext; }; f"
[credential]
	helper = "!f() { touch pwned-cred; }; f"
CFG
PLANT_CMD='git config core.fsmonitor "f() { touch pwned-fsmonitor; }; f" &&
git config core.hooksPath evilhooks &&
git config alias.st2 "!f() { touch pwned-alias; }; f" &&
git config include.path ../evil.cfg &&
git config filter.evil.clean "f() { touch pwned-filter; cat; }; f" &&
git config diff.external "f() { touch pwned-diffext; }; f" &&
git config credential.helper "!f() { touch pwned-cred; }; f" && echo PLANTED'

# mcp CALLS_JSON: runs the tool calls in order in one `cae mcp --workspace` session; prints
# each result's text, one JSON string per line
cat > "$work/mcp.py" <<'PY'
import json, subprocess, sys
cae, ws, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
p = subprocess.Popen([cae, "mcp", "--workspace", ws], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
def send(m):
    p.stdin.write(json.dumps(m) + "\n"); p.stdin.flush()
def wait(i):
    for line in p.stdout:
        m = json.loads(line)
        if m.get("id") == i:
            return m
send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "attack", "version": "1"}}})
wait(0)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
for i, (name, args) in enumerate(calls, 1):
    send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
          "params": {"name": name, "arguments": args}})
    m = wait(i)
    if m is None:
        print(json.dumps({"error": "cae mcp ended without answering call %d" % i}))
        sys.exit(1)
    r = m.get("result") or {}
    text = "".join(c.get("text", "") for c in r.get("content", []))
    print(json.dumps({"error": m.get("error"), "is_error": r.get("isError"), "text": text}))
p.stdin.close()
if p.wait(timeout=60) != 0:
    print(json.dumps({"error": "cae mcp exited with %d" % p.returncode}))
PY
mcp() { python3 "$work/mcp.py" "$CAE" "$ws" "$1"; }
# every call of mcp's output succeeded
succeeded() { jq -e -s 'length > 0 and all(.error == null and .is_error != true)' >/dev/null; }

# host_runs CHANNEL: the owner's git on the host, everything that would run a plant
host_runs() {
	rm -f "$ws"/pwned-*
	echo "change by $1" | owner tee -a "$ws/file.txt" >/dev/null
	ogit status --short >/dev/null 2>&1
	ogit diff >/dev/null 2>&1
	ogit commit -qam "host commit after $1" >/dev/null 2>&1
	ogit log -1 --stat >/dev/null 2>&1
	ogit st2 >/dev/null 2>&1
	ogit inc >/dev/null 2>&1
	printf 'protocol=https\nhost=example.com\n\n' | ogit credential fill >/dev/null 2>&1
}
verdict() { # CHANNEL
	local markers own want="host commit after $1"
	markers=$(cd "$ws" && ls pwned-* 2>/dev/null | tr '\n' ' ')
	check "$1: nothing planted runs in the owner's git on the host (status, diff, commit, log, aliases, credential fill)" \
		'[ -z "$markers" ]' "ran: $markers; .git/config now: $(cat "$ws/.git/config")"
	own=$(ogit own 2>&1)
	check "$1: the owner's own settings are kept (alias with '!', core.editor, user.name)" \
		'[ "$own" = own-alias-ok ] && [ "$(ogit config core.editor)" = true ] && [ "$(ogit config user.name)" = "Owner Person" ]' \
		"own: $own; $(cat "$ws/.git/config")"
	check "$1: the owner's commit was made" '[ "$(ogit log -1 --format=%s)" = "$want" ]' "$(ogit log -1 --format=%s 2>&1)"
}

# --- a command -------------------------------------------------------------------------
out=$(mcp "$(jq -cn --arg c "$PLANT_CMD" '[["exec_command", {command: ["sh", "-c", $c], cwd: "."}]]')")
check "command: the plant ran (git config in the sandbox)" '[[ $out == *PLANTED* ]] && succeeded <<<"$out"' "$out"
host_runs command
verdict command

# --- a process session (process_start), planting and ending in the background -------------
out=$(mcp "$(jq -cn --arg c "sleep 1; $PLANT_CMD" '[["process_start", {command: $c, wait_ms: 20000}]]')")
check "process session: the plant ran" '[[ $out == *PLANTED* ]] && succeeded <<<"$out"' "$out"
host_runs process
verdict process

# --- the text editor ---------------------------------------------------------------------
out=$(mcp "$(jq -cn --arg t "$PLANT" '[["text_editor", {command: "insert", path: ".git/config", insert_line: 0, new_str: ($t + "\n")}]]')")
check "editor: the plant was written" 'succeeded <<<"$out"' "$out"
host_runs editor
verdict editor

# --- a patch ---------------------------------------------------------------------------
out=$(mcp "$(jq -cn --arg t "$PLANT" '[["apply_patch", {patch: ([{type: "file_edit", action: "append", target: ".git/config", content: ("\n" + $t + "\n")}] | tojson)}]]')")
check "patch: the plant was applied" 'succeeded <<<"$out"' "$out"
host_runs patch
verdict patch

# --- a remote (and a branch's push remote) that is a repository the agent made: the owner's
# `git push` would run its hooks
PUSHPLANT='git init -q --bare evilrepo &&
printf "#!/bin/sh\ntouch ../pwned-push\n" > evilrepo/hooks/pre-receive && chmod +x evilrepo/hooks/pre-receive &&
git remote add ev ./evilrepo && git config branch.main.pushremote ev &&
git config remote.origin.pushurl "$PWD/evilrepo" && echo PUSHPLANTED'
out=$(mcp "$(jq -cn --arg c "$PUSHPLANT" '[["exec_command", {command: ["sh", "-c", $c], cwd: "."}]]')")
check "push remote: the plant ran" '[[ $out == *PUSHPLANTED* ]] && succeeded <<<"$out"' "$out"
rm -f "$ws"/pwned-*
ogit push -q >/dev/null 2>&1
ogit push -q origin main >/dev/null 2>&1
check "push remote: the owner's git push reaches no repository the agent made (no hook of it runs)" \
	'[ ! -e "$ws/pwned-push" ]' "$(cat "$ws/.git/config")"
check "push remote: the owner's remote and branch settings are as they were" \
	'[ "$(ogit config remote.origin.url)" = "git://127.0.0.1:$port/r.git" ] && [ -z "$(ogit config remote.origin.pushurl)" ] && [ -z "$(ogit config branch.main.pushremote)" ] && [ "$(ogit config branch.main.remote)" = origin ]' \
	"$(cat "$ws/.git/config")"

# --- .git/config made a link to a file of the agent's (which the host's git would follow)
out=$(mcp "$(jq -cn '[["exec_command", {command: ["sh", "-c", "cp .git/config kept.cfg && cat evil.cfg >> kept.cfg && ln -sf ../kept.cfg .git/config && echo LINKED"], cwd: "."}]]')")
check "config link: the plant ran" '[[ $out == *LINKED* ]] && succeeded <<<"$out"' "$out"
rm -f "$ws"/pwned-*
ogit inc >/dev/null 2>&1
check "config link: .git/config is a file again and holds nothing planted" \
	'[ -f "$ws/.git/config" ] && [ ! -L "$ws/.git/config" ] && [ ! -e "$ws/pwned-include" ] && [ "$(ogit own 2>&1)" = own-alias-ok ]' \
	"$(ls -la "$ws/.git/config"; cat "$ws/.git/config")"

# --- a .git/commondir: the host's git would read the configuration of the directory it names
POINT='mkdir -p evilc && cp -r .git/objects .git/refs .git/HEAD evilc/ &&
printf "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"f() { touch pwned-commondir; }; f\"\n" > evilc/config &&
echo ../evilc > .git/commondir && echo POINTED'
out=$(mcp "$(jq -cn --arg c "$POINT" '[["exec_command", {command: ["sh", "-c", $c], cwd: "."}]]')")
check "commondir: the plant ran" '[[ $out == *POINTED* ]] && succeeded <<<"$out"' "$out"
rm -f "$ws"/pwned-*
ogit status --short >/dev/null 2>&1
check "commondir: the host's git reads no configuration it names (.git/commondir removed)" \
	'[ ! -e "$ws/pwned-commondir" ] && [ ! -e "$ws/.git/commondir" ]' "$(ls "$ws" "$ws/.git")"
check "commondir: the owner's own settings are kept" '[ "$(ogit own 2>&1)" = own-alias-ok ]'

# --- a workspace without .git when it was taken: what the agent makes of it is the agent's
ws2=$work/ws2
mkdir "$ws2" && chown "$OWNER:$OWNER" "$ws2"
echo hello > "$ws2/a.txt"
chown "$OWNER:$OWNER" "$ws2/a.txt"
INIT='git init -q && git config core.fsmonitor "f() { touch pwned-init; }; f" &&
git config alias.st2 "!f() { touch pwned-init-alias; }; f" && git config user.name Agent &&
echo INITED'
out=$(python3 "$work/mcp.py" "$CAE" "$ws2" "$(jq -cn --arg c "$INIT" '[["exec_command", {command: ["sh", "-c", $c], cwd: "."}]]')")
check "no .git at first: the agent's git init and plant ran" '[[ $out == *INITED* ]] && succeeded <<<"$out"' "$out"
owner git -C "$ws2" status --short >/dev/null 2>&1
owner git -C "$ws2" st2 >/dev/null 2>&1
check "no .git at first: the host's git in the agent's new repository runs nothing planted" \
	'[ -z "$(cd "$ws2" && ls pwned-* 2>/dev/null)" ] && [ "$(owner git -C "$ws2" config user.name)" = Agent ]' \
	"$(ls "$ws2"; cat "$ws2/.git/config")"
# (an existing .git is pinned by the sandbox: a gitfile can only be made where there was none)
ws3=$work/ws3
mkdir "$ws3" && chown "$OWNER:$OWNER" "$ws3"
GITFILE='git init -q evilgit &&
git -C evilgit config core.fsmonitor "f() { touch pwned-gitfile; }; f" &&
echo "gitdir: evilgit/.git" > .git && git status --short >/dev/null && echo GITFILE-MADE'
out=$(python3 "$work/mcp.py" "$CAE" "$ws3" "$(jq -cn --arg c "$GITFILE" '[["exec_command", {command: ["sh", "-c", $c], cwd: "."}]]')")
check "gitfile: the plant ran" '[[ $out == *GITFILE-MADE* ]] && succeeded <<<"$out"' "$out"
rm -f "$ws3"/pwned-*
owner git -C "$ws3" status --short >/dev/null 2>&1
check "gitfile: a .git file the agent made is removed; the host's git runs nothing it names" \
	'[ ! -e "$ws3/pwned-gitfile" ] && [ ! -e "$ws3/.git" ]' "$(ls -la "$ws3")"

# --- the agent's ordinary git still works, and its settings stay --------------------------
AGENT='set -e
git config user.name "Agent Name"
git checkout -q -b feat
echo agent >> file.txt && git commit -qam "agent commit"
git remote add up "git://127.0.0.1:'"$port"'/r.git"
git push -q -u origin feat 2>&1
git branch -q --set-upstream-to=origin/main main
echo AGENT-OK'
out=$(mcp "$(jq -cn --arg c "$AGENT" '[["exec_command", {command: ["sh", "-c", $c], cwd: "."}], ["exec_command", {cwd: ".", command: ["sh", "-c", "git config user.name; git config branch.feat.remote; git config remote.up.url; git rev-parse --abbrev-ref main@{upstream}"]}]]')")
check "the agent's git works: config user.name, checkout -b, commit, remote add, push -u, branch --set-upstream-to" \
	'[[ $out == *AGENT-OK* ]] && succeeded <<<"$out"' "$out"
check "the agent sees its settings in its next command" \
	'[[ $out == *"Agent Name"* && $out == *origin* && $out == *"git://127.0.0.1:$port/r.git"* && $out == *origin/main* ]]' "$out"
check "the push reached the loopback server" '[ -n "$(git -C "$work/srv/r.git" rev-parse -q --verify refs/heads/feat)" ]'
check "the host's git sees the agent's settings (user.name, branch.feat.*, remote.up.url, main's upstream)" \
	'[ "$(ogit config user.name)" = "Agent Name" ] && [ "$(ogit config branch.feat.remote)" = origin ] && [ "$(ogit config branch.feat.merge)" = refs/heads/feat ] && [ "$(ogit config remote.up.url)" = "git://127.0.0.1:$port/r.git" ] && [ "$(ogit config branch.main.merge)" = refs/heads/main ]' \
	"$(cat "$ws/.git/config")"
check "the owner's own alias is still there" '[ "$(ogit own 2>&1)" = own-alias-ok ]'
check ".git/config still belongs to the owner" '[ "$(stat -c %u "$ws/.git/config")" = "$OWNER" ]' "$(stat -c '%u %a' "$ws/.git/config")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
