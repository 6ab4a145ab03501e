#!/usr/bin/env bash
# The attack suite: what an agent's commands try, on the embedded default (the local backend,
# run as root exactly as CI and the README's quickstart run it), and what must stop them.
# Every attack is a command line that the command policy lets through (the policy is a word
# list, not the boundary): each is expected to be refused by the sandbox itself.
#
#   tests/attack/attack.sh [--rlimit] [path/to/cae]        (default: build/cae)
#
# With --rlimit the same attacks run where cgroups cannot be made (a mount namespace in which
# the cgroup file systems are read-only), so the bounds are the rlimit fallback's.
# Prints "ok N - ..." / "not ok N - ..." and ends with "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=cgroup
if [ "${1:-}" = --rlimit ]; then
	shift
	if [ -z "${CAE_ATTACK_IN_NS:-}" ]; then
		# Read-only cgroup mounts in a mount namespace of our own; the host's stay as they are.
		exec unshare -m --propagation private env CAE_ATTACK_IN_NS=1 bash -c '
			for m in $(awk "\$3 ~ /^cgroup/ {print \$2}" /proc/self/mounts); do
				mount -o remount,bind,ro "$m" "$m" || exit 1
			done
			exec "$0" --rlimit "$@"' "$0" "$@"
	fi
	mode=rlimit
fi
CAE=$(realpath "${1:-$here/../../build/cae}")
[ -n "${CAE_HELPER:-}" ] || export CAE_HELPER="$(dirname "$CAE")/cae-helper"

# outside /tmp, where an older sandbox of ours (a private /tmp over a read-only host) hid it
mkdir -p /var/tmp
work=$(mktemp -d /var/tmp/cae-attack-XXXXXX)
listener_pid=
cleanup() {
	[ -n "$listener_pid" ] && kill "$listener_pid" 2>/dev/null
	"$CAE" cleanup --backend local A >/dev/null 2>&1
	"$CAE" cleanup --backend local B >/dev/null 2>&1
	CAE_CONFIG=$work/net.yaml "$CAE" cleanup --backend local C >/dev/null 2>&1
	[ -n "${web_pid:-}" ] && kill "$web_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

passed=0 failed=0 n=0
ok() { n=$((n + 1)); passed=$((passed + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && printf '#   %s\n' "$2" | head -20; }
check() { # name, condition (shell), detail
	if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi
}

# A state directory outside /tmp (as a default install's ~/.local/state/cae would be), small
# bounds so that the limits can be hit quickly, and the tokens of a real deployment.
export CAE_STATE_DIR=$work/state
TOKEN="ghp_attackSuiteSecret0123456789abcdefXYZ"
GLTOKEN="glpat-attackSuiteSecret98765"
export GITHUB_PERSONAL_ACCESS_TOKEN=$TOKEN GITLAB_PERSONAL_ACCESS_TOKEN=$GLTOKEN
# (the rlimit run has a uid of its own: RLIMIT_NPROC counts every process of the uid)
cat > "$work/config.yaml" <<YAML
command_executor:
  backend: local
  local:
    sandbox_uid: $([ $mode = rlimit ] && echo 100077 || echo 100000)
  docker:
    resources:
      pids_limit: 64
      memory_limit: 256m
      disk_limit: 64m
YAML
export CAE_CONFIG=$work/config.yaml
unset CAE_LOG_LEVEL

mkdir -p "$work/a" "$work/b"
echo "task A's file" > "$work/a/a.txt"
echo "B-SECRET-CONTENT" > "$work/b/b-secret.txt"
"$CAE" prepare --workspace "$work/a" --uuid A > "$work/a.json" 2>/dev/null || { echo "prepare A failed"; exit 1; }
"$CAE" prepare --workspace "$work/b" --uuid B > "$work/b.json" 2>/dev/null || { echo "prepare B failed"; exit 1; }

# run UUID SCRIPT [TIMEOUT]: the command's stdout+stderr (the JSON's fields, joined)
run() {
	"$CAE" exec --uuid "$1" --timeout "${3:-60}" -- "$2" 2>/dev/null |
		jq -r '.stdout + .stderr + "\nexit=" + (.exit_code|tostring)'
}

# --- who commands are -------------------------------------------------------------------
out=$(run A 'id -u; grep -E "^(CapEff|CapPrm|NoNewPrivs)" /proc/self/status')
check "commands run as uid 1000 inside" '[[ $out == 1000* ]]' "$out"
check "no capabilities (CapEff and CapPrm are 0)" \
	'grep -q "CapEff:.0000000000000000" <<<"$out" && grep -q "CapPrm:.0000000000000000" <<<"$out"' "$out"
check "no new privileges (setuid programs do not elevate)" 'grep -q "NoNewPrivs:.1" <<<"$out"' "$out"
run A 'echo x > owned-by.txt' >/dev/null
check "on the host, files written by commands belong to an unprivileged uid" \
	'[ "$(stat -c %u "$work/a/owned-by.txt")" != 0 ]' "$(stat -c %u "$work/a/owned-by.txt")"

# --- the host's file system -------------------------------------------------------------
out=$(run A 'for p in /etc/shadow /etc/gshadow /etc/sudoers /etc/ssh /etc/machine-id /etc/gitconfig /etc/pip.conf /etc/npmrc /etc/docker /root /run /var/run /boot /srv /mnt /media /opt /var/lib; do [ -e $p ] && echo PRESENT $p; done; ls /home; echo end')
check "/etc/shadow, ssh, credentials in /etc, /root, /run, /var/run, /var/lib are absent; /home has only the agent" '[[ $out != *PRESENT* && $out == agent$'"'\n'"'end* ]]' "$out"
out=$(run A 'grep -c "" /etc/passwd; grep -v -e ^root: -e ^agent: -e ^nobody: /etc/passwd; echo end')
check "/etc/passwd is the sandbox's own (root, agent, nobody)" '[[ $out == 3$'"'\n'"'end* ]]' "$out"
out=$(run A 'python3 -c "
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.mount(b\"none\", b\"/\", None, 32, None)
print(\"remount\", r, os.strerror(ctypes.get_errno()))
r = libc.mount(b\"none\", b\"/usr\", None, 32, None)
print(\"remount-usr\", r)
"; echo pwned > /etc/cae-pwned; echo pwned > /usr/cae-pwned; echo pwned > /dev/cae-pwned; echo end')
check "remounting / or /usr read-write is refused" '[[ $out == *"remount -1"* && $out == *"remount-usr -1"* ]]' "$out"
check "/etc, /usr and /dev cannot be written" '[ ! -e /etc/cae-pwned ] && [ ! -e /usr/cae-pwned ] && [[ $out == *"Read-only file system"* ]]' "$out"
out=$(run A 'echo 1 > /proc/sys/vm/drop_caches && echo WROTE-SYSCTL; echo c > /proc/sysrq-trigger && echo WROTE-SYSRQ; cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern && echo WROTE-CORE; echo end')
check "/proc/sys, sysrq and core_pattern cannot be written" '[[ $out != *WROTE* ]]' "$out"
out=$(run A 'ls /sys/fs/cgroup 2>&1 | head -1; cat /proc/self/cgroup | grep -c "cae-" ; echo end')
check "the cgroup tree is neither mounted nor named" '[[ $out == *"No such file"* ]]' "$out"
out=$(run A 'unshare -U true 2>&1; unshare -r true 2>&1; echo end')
check "no further user namespaces (unshare -U, unshare -r)" '[[ $out == *"unshare failed"* && $out != *$'"'\n'"'end*unshare*ok* ]] && ! grep -q "^ok" <<<"$out"' "$out"
state_dir=$CAE_STATE_DIR
out=$(run A "ls '$state_dir' 2>&1; cat '$work/b/b-secret.txt' 2>&1; grep -rs B-SECRET-CONTENT / 2>/dev/null | head -1; echo end")
check "the state directory and another task's workspace are out of reach" '[[ $out != *B-SECRET-CONTENT* && $out == *"No such file"* ]]' "$out"
ln -sf /etc/shadow "$work/a/shadow-link"
out=$(run A 'cat shadow-link 2>&1; echo end')
check "a symlink to a host file leads nowhere inside" '[[ $out != *root:* ]]' "$out"

# --- host sockets, processes, network ----------------------------------------------------
out=$(run A 'for s in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /var/run/dbus/system_bus_socket; do [ -S $s ] && echo REACHED $s; done; curl -s --max-time 3 --unix-socket /var/run/docker.sock http://x/version 2>&1 | head -c 200; echo end')
check "the Docker socket and other host sockets are absent" '[[ $out != *REACHED* && $out != *ApiVersion* ]]' "$out"
python3 - "$work" <<'PY' &
import os, socket, sys, time
work = sys.argv[1]
a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
a.bind("\0cae-attack-" + os.path.basename(work))
a.listen(5)
t = socket.socket()
t.bind(("127.0.0.1", 0))
t.listen(5)
open(work + "/port", "w").write(str(t.getsockname()[1]))
time.sleep(120)
PY
listener_pid=$!
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")
abstract="cae-attack-$(basename "$work")"
out=$(run A "python3 -c '
import socket
for what, fam, addr in ((\"loopback\", socket.AF_INET, (\"127.0.0.1\", $port)), (\"abstract\", socket.AF_UNIX, \"\\0$abstract\")):
    s = socket.socket(fam)
    s.settimeout(3)
    try:
        s.connect(addr); print(\"CONNECTED\", what)
    except OSError as e:
        print(\"refused\", what, e)
'; echo end")
check "no network: the host's loopback and abstract sockets are unreachable" '[[ $out != *CONNECTED* && $out == *"refused loopback"* && $out == *"refused abstract"* ]]' "$out"
out=$(run A "ps -e -o pid= | wc -l; python3 -c 'import os
try:
    os.kill($listener_pid, 0); print(\"SEES-HOST-PROCESS\")
except OSError as e: print(\"no such process\", e.errno)'; echo end")
check "host processes are invisible and cannot be signalled" '[[ $out != *SEES-HOST-PROCESS* ]] && [ "$(head -1 <<<"$out")" -lt 10 ]' "$out"

# --- secrets ------------------------------------------------------------------------------
raw=$("$CAE" exec --uuid A -- '(env; cat /proc/*/environ /proc/*/cmdline; git config --list) 2>/dev/null | base64 -w0' 2>/dev/null | jq -r .stdout | base64 -d 2>/dev/null | tr -d '\0')
check "no token in any command's reach (environment, /proc, git config; checked after base64)" \
	'[ -n "$raw" ] && [[ $raw != *"$TOKEN"* && $raw != *"$GLTOKEN"* && $raw != *attackSuiteSecret* ]]' \
	"$(grep -a -o '.\{20\}attackSuiteSecret.\{10\}' <<<"$raw" | head -3)"
out=$(run A 'printenv | cut -d= -f1 | sort | tr "\n" " "')
check "the environment is the sandbox's own" '[[ $out != *TOKEN* && $out != *CAE_* && $out == *HOME* && $out == *PATH* ]]' "$out"

# --- bounds -------------------------------------------------------------------------------
limits=$(jq -c .limits "$work/a.json")
check "the result says how commands are bounded ($mode)" '[[ $(jq -r .mechanism <<<"$limits") == "$mode" ]]' "$limits"
# counted with shell builtins only: while the bomb holds the bound, nothing else can fork
out=$(run A 'sh -c '"'"'i=0; while [ $i -lt 300 ]; do sleep 20 & i=$((i+1)); done'"'"' 2>/dev/null; set -- /proc/[0-9]*; echo $#' 30)
count=$(head -1 <<<"$out")
check "a fork bomb is held by the process bound (64)" '[ "${count:-999}" -lt 64 ]' "$out"
out=$(run A 'python3 -c "
b = []
for i in range(64):
    b.append(bytearray(16 << 20))
print(\"ALLOCATED\", len(b) * 16, \"MiB\")
"; echo "exit=$?"' 60)
check "memory past the bound (256 MiB) is refused or killed" '[[ $out != *"ALLOCATED 1024"* && $out == *exit=1[0-9][0-9]* || $out == *MemoryError* ]]' "$out"
# files under the per-file bound (64 MiB), together over the size of /tmp (64 MiB)
out=$(run A 'head -c 40000000 /dev/zero > /tmp/a; head -c 40000000 /dev/zero > /tmp/b; du -cm /tmp/a /tmp/b | tail -1 | cut -f1' 60)
check "/tmp is bounded (64 MiB)" '[[ $out == *"No space left"* ]] && [ "$(head -1 <<<"$out")" -le 64 ]' "$out"
out=$(run A 'head -c 40000000 /dev/zero > /dev/shm/a; head -c 40000000 /dev/zero > /dev/shm/b; echo end' 60)
check "/dev/shm is bounded" '[[ $out == *"No space left"* ]]' "$out"
out=$(run A 'head -c 100000000 /dev/zero > big; echo "exit=$?"; rm -f big' 60)
check "a file past the per-file bound (disk_limit) is refused" '[[ $out == *"exit=153"* || $out == *"File too large"* ]]' "$out"

# --- a filtered network (command_executor.docker.network.whitelist_mode) ----------------------
# Environment C: an allow-list. Named hosts are served on this host's loopback: cae runs in a
# mount namespace of its own whose /etc/hosts maps them to 127.0.0.x (the proxy resolves
# names, the sandbox does not), and allowed_addresses lets the proxy reach 127.0.0.1 only.
mkdir -p "$work/www"
for p in plain tunnel socks; do echo "NET-OK /$p" > "$work/www/$p"; done
git init -q --bare "$work/www/repo.git" && git init -q "$work/upstream" &&
	echo "cloned through the proxy" > "$work/upstream/README" &&
	git -C "$work/upstream" add README && git -C "$work/upstream" -c user.name=t -c user.email=t@t commit -qm first &&
	git -C "$work/upstream" push -q "$work/www/repo.git" HEAD:refs/heads/main &&
	git -C "$work/www/repo.git" symbolic-ref HEAD refs/heads/main && git -C "$work/www/repo.git" update-server-info
python3 - "$work" <<'PY' &
import functools, http.server, sys
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(H, directory=sys.argv[1] + "/www"))
open(sys.argv[1] + "/web-port", "w").write(str(s.server_address[1]))
s.serve_forever()
PY
web_pid=$!
for _ in $(seq 50); do [ -s "$work/web-port" ] && break; sleep 0.1; done
wport=$(cat "$work/web-port")
{ cat /etc/hosts; echo "127.0.0.1 allowed.test denied.test"; echo "127.0.0.3 loop.test"; } > "$work/hosts"
sed -e 's/^  docker:$/  docker:\n    network:\n      whitelist_mode: true\n      allowed_domains: [allowed.test, loop.test]\n      allowed_addresses: [127.0.0.1\/32]/' \
	"$work/config.yaml" > "$work/net.yaml"
mkdir -p "$work/c"
# netcae ARGS...: cae with the allow-list, in a mount namespace with the test's /etc/hosts
netcae() {
	unshare -m --propagation private sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' \
		"$work/hosts" env CAE_CONFIG="$work/net.yaml" "$CAE" "$@"
}
netcae prepare --workspace "$work/c" --uuid C > "$work/c.json" 2>/dev/null || echo "prepare C failed"
netrun() { netcae exec --uuid C --timeout 60 -- "$1" 2>/dev/null; }
res=$(netrun "curl -sS -m 10 http://allowed.test:$wport/plain; curl -sS -m 10 -p http://allowed.test:$wport/tunnel; curl -sS -m 10 -x \"\$ALL_PROXY\" http://allowed.test:$wport/socks")
out=$(jq -r '.stdout + .stderr' <<<"$res")
res2=$(netrun "git clone -q http://allowed.test:$wport/repo.git /tmp/cl 2>&1 && cat /tmp/cl/README")
check "filtered network: git clone over http from an allowed name, through the proxy variables" \
	'[[ $(jq -r .stdout <<<"$res2") == *"cloned through the proxy"* ]]' "$res2"
check "filtered network: an allowed name is reached through the proxy variables (HTTP, CONNECT, SOCKS5)" \
	'[[ $out == *"NET-OK /plain"* && $out == *"NET-OK /tunnel"* && $out == *"NET-OK /socks"* ]] && [ "$(jq -r ".network_denied // empty" <<<"$res")" = "" ]' "$res"
res=$(netrun "curl -sS -m 10 http://denied.test:$wport/x; echo; curl -sS -m 10 -x \"\$ALL_PROXY\" http://denied.test:$wport/y; echo end")
out=$(jq -r '.stdout + .stderr' <<<"$res")
check "filtered network: a name not listed gets the policy's 403 text, SOCKS5 a refusal" \
	'[[ $out == *"blocked by cae network policy: denied.test is not in allowed_domains"* && $out != *NET-OK* && $out == *"SOCKS5 connection to denied.test. (2)"* ]]' "$res"
check "filtered network: the command result reports what was refused (network_denied)" \
	'[ "$(jq -c "[.network_denied[] | [.host, .port, .count]]" <<<"$res")" = "[[\"denied.test\",$wport,2]]" ]' "$res"
res=$(netrun "curl -sS -m 10 -x http://127.0.0.1:3128 http://127.0.0.2:$wport/lit; echo; curl -sS -m 10 http://loop.test:$wport/loop; echo end")
out=$(jq -r '.stdout + .stderr' <<<"$res")
check "filtered network: an IP literal and a name resolving to loopback outside allowed_addresses are refused" \
	'[[ $out == *"127.0.0.2 is an IP address, not in allowed_addresses"* && $out == *"loop.test resolves to 127.0.0.3, a loopback address not in allowed_addresses"* && $out != *NET-OK* ]]' "$res"
res=$(netrun "curl -sS -m 5 --noproxy '*' http://allowed.test:$wport/direct; curl -sS -m 5 --noproxy '*' http://127.0.0.1:$wport/direct; getent hosts allowed.test || echo NO-DNS; python3 -c '
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect((\"127.0.0.1\", $wport)); print(\"CONNECTED\")
except OSError as e:
    print(\"raw socket refused\", e)
'; echo end")
out=$(jq -r '.stdout + .stderr' <<<"$res")
check "filtered network: no way round the proxy (--noproxy, a raw socket to 127.0.0.1, DNS)" \
	'[[ $out != *NET-OK* && $out != *CONNECTED* && $out == *NO-DNS* && $out == *"raw socket refused"* ]]' "$res"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
