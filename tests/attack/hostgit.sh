#!/usr/bin/env bash
# The operator's identity is not lent out: the git and ssh that cae runs on this host (the
# local backend's clone, the mirror cache's ls-remote and fetch) get an environment of their
# own (src/backend/hostgit.c), whatever cae's environment holds. Run as root, as CI runs it.
#
#   tests/attack/hostgit.sh [path/to/cae]        (default: build/cae)
#
# - an http server on 127.0.0.1 that records every request's line and headers, while cae's
#   HOME holds a .netrc for 127.0.0.1 and a .gitconfig, XDG_CONFIG_HOME and GIT_CONFIG_GLOBAL
#   name configurations that add a header and rewrite the URL (url.*.insteadOf): the server
#   never sees the netrc password, the headers or the rewritten path;
# - an ssh:// clone against a real sshd on 127.0.0.1 (its own config and host key, never the
#   system's) whose authorized key is held only by an ssh-agent (SSH_AUTH_SOCK in cae's
#   environment) and by ~/.ssh of root's passwd home (a directory of the test, bound over
#   /root in a mount namespace of its own: the real /root is never touched): the clone
#   fails (publickey), and succeeds once command_executor.clone.ssh_identity_file names a key
#   the server accepts.
# Prints "ok N - ..." / "not ok N - ..." and ends with "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CAE=$(realpath "${1:-$here/../../build/cae}")
[ -n "${CAE_HELPER:-}" ] || export CAE_HELPER="$(dirname "$CAE")/cae-helper"
[ "$(id -u)" = 0 ] || { echo "hostgit.sh: run as root (as CI does)"; exit 1; }

mkdir -p /var/tmp
work=$(mktemp -d /var/tmp/cae-hostgit-XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	[ -n "${SSH_AGENT_PID:-}" ] && kill "$SSH_AGENT_PID" 2>/dev/null
	for u in H1 H2 H3 S1 S2 S3 S4; do
		CAE_CONFIG=$work/config.yaml "$CAE" cleanup --backend local "$u" >/dev/null 2>&1
	done
	rm -rf "$work"
}
trap cleanup EXIT

passed=0 failed=0 n=0
ok() { n=$((n + 1)); passed=$((passed + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && printf '#   %s\n' "$2" | head -20; }
check() { # name, condition (shell), detail
	if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

export CAE_STATE_DIR=$work/state
unset CAE_LOG_LEVEL
# the operator's own environment: a netrc for the host, configurations that add a header and
# point the URL elsewhere, an agent (below)
NETRC_PW="netrc-password-$RANDOM$RANDOM"
op_home=$work/op-home
mkdir -p "$op_home" "$work/xdg/git"
printf 'machine 127.0.0.1 login operator password %s\n' "$NETRC_PW" > "$op_home/.netrc"
chmod 600 "$op_home/.netrc"
http_port=$(free_port)
base=http://127.0.0.1:$http_port
printf '[http]\n\textraHeader = X-Planted: home-gitconfig\n[url "%s/planted-home/"]\n\tinsteadOf = %s/repo/\n' "$base" "$base" > "$op_home/.gitconfig"
printf '[http]\n\textraHeader = X-Planted: xdg\n' > "$work/xdg/git/config"
printf '[http]\n\textraHeader = X-Planted: git-config-global\n[url "%s/planted-global/"]\n\tinsteadOf = %s/repo/\n[core]\n\tfsmonitor = touch %s/fsmonitor-ran\n' \
	"$base" "$base" "$work" > "$work/global.cfg"
export HOME=$op_home XDG_CONFIG_HOME=$work/xdg GIT_CONFIG_GLOBAL=$work/global.cfg
export GIT_CONFIG_PARAMETERS="'http.extraheader=X-Planted: parameters'"

cat > "$work/config.yaml" <<YAML
command_executor:
  backend: local
  clone:
    timeout_seconds: 60
YAML
cat > "$work/mirror.yaml" <<YAML
command_executor:
  backend: local
  clone:
    timeout_seconds: 60
    mirror_cache:
      enabled: true
YAML
export CAE_CONFIG=$work/config.yaml

# --- http: netrc, configuration from the environment ------------------------------------
cat > "$work/recorder.py" <<'PY'
import http.server, sys
log = open(sys.argv[2], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        log.write(self.requestline + "\n" + str(self.headers) + "\n")
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_POST = do_GET
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
python3 "$work/recorder.py" "$http_port" "$work/requests.log" &
pids+=($!)
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null && break; sleep 0.1; done

"$CAE" prepare --repo "$base/repo/x.git" --uuid H1 > "$work/h1.json" 2> "$work/h1.err"
"$CAE" prepare --config "$work/mirror.yaml" --repo "$base/repo/y.git" --uuid H2 > "$work/h2.json" 2> "$work/h2.err"
reqs=$(cat "$work/requests.log" 2>/dev/null)
b64=$(printf 'operator:%s' "$NETRC_PW" | base64 -w0)
check "both clones reached the server (local clone and mirror cache)" \
	'grep -q "/x.git/info/refs" <<<"$reqs" && grep -q "/y.git/info/refs" <<<"$reqs"' "$reqs$(cat "$work/h1.err" "$work/h2.err")"
check "the server never sees the operator's ~/.netrc password (local clone, mirror cache)" \
	'[[ $reqs != *"$b64"* && $reqs != *Authorization* && $reqs != *authorization* ]]' \
	"$(grep -i authorization <<<"$reqs" | head -3)"
check "no configuration of cae's environment reaches git (HOME/.gitconfig, XDG_CONFIG_HOME, GIT_CONFIG_GLOBAL, GIT_CONFIG_PARAMETERS)" \
	'[[ $reqs != *X-Planted* && $reqs != *planted-* ]]' "$(grep -i -e planted <<<"$reqs" | head -5)"
check "no fsmonitor of GIT_CONFIG_GLOBAL ran" '[ ! -e "$work/fsmonitor-ran" ]'
check "cae's own home for git on this host is empty, 0700" \
	'[ "$(stat -c %a "$CAE_STATE_DIR/host-home")" = 700 ] && [ -z "$(ls -A "$CAE_STATE_DIR/host-home")" ]' \
	"$(ls -la "$CAE_STATE_DIR/host-home" 2>&1)"
# something written into cae's home (a .netrc, a .gitconfig) is gone before git runs there
cp "$op_home/.netrc" "$op_home/.gitconfig" "$CAE_STATE_DIR/host-home/"
: > "$work/requests.log"
"$CAE" prepare --repo "$base/repo/z.git" --uuid H3 > "$work/h3.json" 2> "$work/h3.err"
reqs=$(cat "$work/requests.log" 2>/dev/null)
check "cae's home is made empty again before use (a .netrc and .gitconfig put there are not read)" \
	'grep -q "/z.git/info/refs" <<<"$reqs" && [[ $reqs != *Authorization* && $reqs != *X-Planted* && $reqs != *planted-* ]] && [ -z "$(ls -A "$CAE_STATE_DIR/host-home")" ]' \
	"$reqs"

# --- ssh: no agent, no ~/.ssh, only the operator's key for cae ---------------------------
mkdir -p "$work/sshd" "$work/root/.ssh" "$work/repos"
chmod 700 "$work/root" "$work/root/.ssh"
ssh-keygen -q -t ed25519 -N '' -f "$work/sshd/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/agent_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/cae_key"
# the key the agent holds, also as the default identity in root's passwd home
cp "$work/agent_key" "$work/root/.ssh/id_ed25519"
cp "$work/agent_key.pub" "$work/root/.ssh/id_ed25519.pub"
cat "$work/agent_key.pub" "$work/cae_key.pub" > "$work/sshd/authorized_keys"
ssh_port=$(free_port)
printf '[127.0.0.1]:%s %s\n' "$ssh_port" "$(cut -d' ' -f1,2 "$work/sshd/host_key.pub")" > "$work/known_hosts"
# the operator's own ssh trusts the host too (root's ~/.ssh/known_hosts, as a real one would)
cp "$work/known_hosts" "$work/root/.ssh/known_hosts"
cat > "$work/sshd/sshd_config" <<CFG
Port $ssh_port
ListenAddress 127.0.0.1
HostKey $work/sshd/host_key
PidFile $work/sshd/sshd.pid
AuthorizedKeysFile $work/sshd/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowUsers root
LogLevel VERBOSE
CFG
mkdir -p /run/sshd # sshd's privilege separation directory (Debian's, empty)
/usr/sbin/sshd -D -e -f "$work/sshd/sshd_config" 2> "$work/sshd/log" &
pids+=($!)
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$ssh_port") 2>/dev/null && break; sleep 0.1; done
git init -q --bare "$work/repos/r.git"
git -C "$work/repos" clone -q r.git w 2>/dev/null
git -C "$work/repos/w" -c user.name=t -c user.email=t@t commit -q --allow-empty -m one
git -C "$work/repos/w" push -q origin HEAD:main 2>/dev/null
git -C "$work/repos/r.git" symbolic-ref HEAD refs/heads/main
eval "$(ssh-agent -s -a "$work/agent.sock")" >/dev/null
ssh-add -q "$work/agent_key" 2>/dev/null
url="ssh://127.0.0.1:$ssh_port$work/repos/r.git" # as root, the local user
# the operator's own ssh gets in (the agent, the known host): the fixture works
out=$(unshare -m --propagation private sh -c 'mount --bind "$1" /root && exec git ls-remote "$2"' sh "$work/root" "$url" 2>&1)
check "the fixture: the operator's own git over ssh gets in (agent, ~/.ssh)" '[[ $out == *refs/heads/main* ]]' "$out"

# cae run where root's passwd home is the test's (mount namespace of its own), and with a
# GIT_SSH_COMMAND of the operator's that leaves a mark
cae_ns() {
	GIT_SSH_COMMAND="touch $work/git-ssh-command-ran; ssh" \
		unshare -m --propagation private sh -c 'mount --bind "$1" /root && shift && exec "$@"' \
		sh "$work/root" "$CAE" "$@"
}
cat > "$work/ssh-kh.yaml" <<YAML
command_executor:
  backend: local
  clone:
    timeout_seconds: 60
    ssh_known_hosts_file: $work/known_hosts
YAML
cat > "$work/ssh-id.yaml" <<YAML
command_executor:
  backend: local
  clone:
    timeout_seconds: 60
    ssh_known_hosts_file: $work/known_hosts
    ssh_identity_file: $work/cae_key
    mirror_cache:
      enabled: true
YAML
sed 's/^    mirror_cache:.*//; s/^      enabled: true//' "$work/ssh-id.yaml" > "$work/ssh-id-local.yaml"
cp "$work/ssh-kh.yaml" "$work/ssh-kh-mirror.yaml"
printf '    mirror_cache:\n      enabled: true\n' >> "$work/ssh-kh-mirror.yaml"

# sshd's verdicts so far: a clone that fails must have reached authentication (the host key
# was accepted) and been accepted nowhere
verdicts() { grep -c -e "Accepted publickey" -e "closed by authenticating user" "$work/sshd/log"; }
accepted() { grep -c "Accepted publickey" "$work/sshd/log"; }
v0=$(verdicts) a0=$(accepted)
cae_ns prepare --config "$work/ssh-kh.yaml" --repo "$url" --uuid S1 > "$work/s1.json" 2> "$work/s1.err"
r1=$?
v1=$(verdicts) a1=$(accepted)
cae_ns prepare --config "$work/ssh-kh-mirror.yaml" --repo "$url" --uuid S2 > "$work/s2.json" 2> "$work/s2.err"
r2=$?
v2=$(verdicts) a2=$(accepted)
check "an ssh:// clone does not use the operator's agent or ~/.ssh keys (local clone)" \
	'[ $r1 != 0 ] && [ $v1 -gt $v0 ] && [ $a1 = $a0 ]' "$(cat "$work/s1.json" "$work/s1.err"; tail -5 "$work/sshd/log")"
check "an ssh:// clone does not use the operator's agent or ~/.ssh keys (mirror cache)" \
	'[ $r2 != 0 ] && [ $v2 -gt $v1 ] && [ $a2 = $a1 ]' "$(cat "$work/s2.json" "$work/s2.err"; tail -5 "$work/sshd/log")"
cae_ns prepare --config "$work/ssh-id-local.yaml" --repo "$url" --uuid S3 > "$work/s3.json" 2> "$work/s3.err"
r3=$?
cae_ns prepare --config "$work/ssh-id.yaml" --repo "$url" --uuid S4 > "$work/s4.json" 2> "$work/s4.err"
r4=$?
# (the check runs in cae's own mount namespace: a workspace is a file system of its own, mounted
# where cae runs)
check "with clone.ssh_identity_file the ssh:// clone succeeds (local clone)" \
	'[ $r3 = 0 ] && cae_ns exec --uuid S3 -- "test -d .git" >/dev/null 2>&1' "$(cat "$work/s3.json" "$work/s3.err")"
check "with clone.ssh_identity_file the ssh:// clone succeeds (mirror cache)" \
	'[ $r4 = 0 ] && cae_ns exec --uuid S4 -- "test -d .git" >/dev/null 2>&1' "$(cat "$work/s4.json" "$work/s4.err")"
check "the operator's GIT_SSH_COMMAND is not cae's" '[ ! -e "$work/git-ssh-command-ran" ]'
agent_fp=$(ssh-keygen -lf "$work/agent_key.pub" | cut -d' ' -f2)
cae_fp=$(ssh-keygen -lf "$work/cae_key.pub" | cut -d' ' -f2)
accepted=$(grep "Accepted publickey" "$work/sshd/log")
check "sshd accepted the agent's key once (the operator's own ssh), cae's key for cae's clones" \
	'[ "$(grep -c -- "$agent_fp" <<<"$accepted")" = 1 ] && [ "$(grep -c -- "$cae_fp" <<<"$accepted")" -ge 2 ]' "$accepted"

san=$(grep -l -e "Sanitizer" -e "runtime error" "$work"/*.err 2>/dev/null)
check "no sanitizer report from cae (a sanitized build)" '[ -z "$san" ]' "$(cat $san 2>/dev/null | head -20)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
