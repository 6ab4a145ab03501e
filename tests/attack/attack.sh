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
# A session keyring of the suite's own (keyutils' keyctl), in which the suite keeps a key of
# the caller's that the attacks below look for.
if [ -z "${CAE_ATTACK_KEYRING:-}" ]; then
	command -v keyctl >/dev/null || { echo "keyctl (Debian keyutils) is needed"; exit 1; }
	exec env CAE_ATTACK_KEYRING=1 keyctl session - "$0" "$@"
fi
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
	"$CAE" cleanup --backend local C >/dev/null 2>&1
	"$CAE" cleanup --backend local D >/dev/null 2>&1
	"$CAE" cleanup --backend local E >/dev/null 2>&1
	CAE_CONFIG=$work/net.yaml "$CAE" cleanup --backend local N >/dev/null 2>&1
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
state_dir=$CAE_STATE_DIR
TOKEN="ghp_attackSuiteSecret0123456789abcdefXYZ"
GLTOKEN="glpat-attackSuiteSecret98765"
export GITHUB_PERSONAL_ACCESS_TOKEN=$TOKEN GITLAB_PERSONAL_ACCESS_TOKEN=$GLTOKEN
# (the rlimit run has a uid of its own: RLIMIT_NPROC counts every process of the uid)
sandbox_uid=$([ $mode = rlimit ] && echo 100077 || echo 100000)
cat > "$work/config.yaml" <<YAML
command_executor:
  backend: local
  local:
    sandbox_uid: $sandbox_uid
  docker:
    resources:
      pids_limit: 64
      memory_limit: 256m
      disk_limit: 64m
YAML
export CAE_CONFIG=$work/config.yaml
unset CAE_LOG_LEVEL

mkdir -p "$work/a" "$work/b" "$work/e"
echo "task A's file" > "$work/a/a.txt"
echo "B-SECRET-CONTENT" > "$work/b/b-secret.txt"
# A: a repository root owns (as `cae mcp --workspace DIR` run as root finds it); E: a
# directory of an unprivileged user's
git -C "$work/a" init -q && git -C "$work/a" add a.txt && git -C "$work/a" -c user.name=t -c user.email=t@t commit -qm a
echo "E's file" > "$work/e/e.txt" && chown -R 4242:4243 "$work/e"
owner_a_before=$(stat -c %u:%g "$work/a") owner_e_before=$(stat -c %u:%g "$work/e")
"$CAE" prepare --workspace "$work/a" --uuid A > "$work/a.json" 2>/dev/null || { echo "prepare A failed"; exit 1; }
"$CAE" prepare --workspace "$work/e" --uuid E > "$work/e.json" 2>/dev/null || { echo "prepare E failed"; exit 1; }
"$CAE" prepare --workspace "$work/b" --uuid B > "$work/b.json" 2>/dev/null || { echo "prepare B failed"; exit 1; }
# C and D: workspaces of cae's own (cloned), on file systems of their own
git init -q "$work/repo" && echo "task C" > "$work/repo/c.txt" && git -C "$work/repo" add c.txt &&
	git -C "$work/repo" -c user.name=t -c user.email=t@t commit -qm c || { echo "repo failed"; exit 1; }
"$CAE" prepare --repo "$work/repo" --uuid C > "$work/c.json" 2>/dev/null || { echo "prepare C failed"; exit 1; }
"$CAE" prepare --repo "$work/repo" --uuid D > "$work/d.json" 2>/dev/null || { echo "prepare D failed"; exit 1; }

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
run C 'echo x > owned-by.txt' >/dev/null
check "on the host, files written by commands in a workspace of cae's own belong to an unprivileged uid" \
	'[ "$(stat -c %u "$state_dir/local/C/workspace/project/owned-by.txt")" = $sandbox_uid ]' "$(stat -c %u "$state_dir/local/C/workspace/project/owned-by.txt")"

# --- a workspace the user owns: mapped for the sandbox, never given away ------------------
out=$(run A 'echo x > owned-by.txt; mkdir -p made/sub && echo z > made/sub/f; stat -c "%u %n" . a.txt owned-by.txt made/sub; git status --short; echo end')
check "inside, a workspace root owns is the agent's (uid 1000) and its git works" \
	'[[ $out == *"1000 ."*"1000 a.txt"*"1000 owned-by.txt"*"1000 made/sub"* && $out == *"?? made/"* && $out != *dubious* ]]' "$out"
check "its owner on disk stays root's during the environment ($owner_a_before)" \
	'[ "$owner_a_before" = 0:0 ] && [ "$(stat -c %u:%g "$work/a" "$work/a/a.txt" "$work/a/owned-by.txt" "$work/a/made/sub" | sort -u)" = 0:0 ]' \
	"$(stat -c "%u:%g %n" "$work/a" "$work/a/a.txt" "$work/a/owned-by.txt" "$work/a/made/sub")"
out=$(git -C "$work/a" status --short 2>&1)
check "root's git keeps working on it" '[[ $out == *"?? owned-by.txt"* && $out != *dubious* ]]' "$out"
out=$(run E 'id -u; echo y > made.txt; stat -c "%u %n" . e.txt made.txt; echo end')
check "a workspace of an unprivileged user's: the agent is uid 1000 inside and the files are its" \
	'[[ $out == 1000*"1000 ."*"1000 e.txt"*"1000 made.txt"* ]]' "$out"
check "... and on disk they stay the user's ($owner_e_before), the file the agent made included" \
	'[ "$owner_e_before" = 4242:4243 ] && [ "$(stat -c %u:%g "$work/e" "$work/e/e.txt" "$work/e/made.txt" | sort -u)" = 4242:4243 ]' \
	"$(stat -c "%u:%g %n" "$work/e" "$work/e/e.txt" "$work/e/made.txt")"
# (a sleep of this run's own length: another run of this suite may be sleeping beside it)
"$CAE" exec --uuid E -- "sleep 4.$$" >/dev/null 2>&1 &
for _ in $(seq 100); do
	uid_e=$(ps -eo uid=,args= | awk -v len="4.$$" '$2 == "sleep" && $3 == len {print $1; exit}')
	[ -n "$uid_e" ] && break
	sleep 0.1
done
wait $!
check "... while commands run as the sandbox's uid on the host ($uid_e), not as the user" '[ "$uid_e" = $sandbox_uid ]'
"$CAE" cleanup --backend local E >/dev/null 2>&1
check "after cleanup the user's directory is still the user's" '[ "$(stat -c %u:%g "$work/e" "$work/e/made.txt" | sort -u)" = 4242:4243 ]'

# --- the host's file system -------------------------------------------------------------
out=$(run A 'for p in /etc/shadow /etc/gshadow /etc/sudoers /etc/ssh /etc/machine-id /etc/pip.conf /etc/npmrc /etc/maven/settings.xml /etc/docker /root /run /var/run /boot /srv /mnt /media /opt /var/lib; do [ -e $p ] && echo PRESENT $p; done; ls /home; echo end')
check "/etc/shadow, ssh, credentials in /etc (Maven's settings.xml too), /root, /run, /var/run, /var/lib are absent; /home has only the agent" '[[ $out != *PRESENT* && $out == agent$'"'\n'"'end* ]]' "$out"
out=$(run A 'git config --system --list; echo end')
check "/etc/gitconfig is the sandbox's own: the commits' identity, nothing of the host's" \
	'[[ $out == "user.name=Coding Agent"$'"'\n'"'"user.email=coding-agent@localhost"$'"'\n'"'end* ]]' "$out"
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
check "no further user namespaces (unshare -U, unshare -r: EPERM, the seccomp filter's)" '[[ $out == *"unshare failed: Operation not permitted"* && $out != *$'"'\n'"'end*unshare*ok* ]] && ! grep -q "^ok" <<<"$out"' "$out"
state_dir=$CAE_STATE_DIR
out=$(run A "ls '$state_dir' 2>&1; cat '$work/b/b-secret.txt' 2>&1; grep -rs B-SECRET-CONTENT / 2>/dev/null | head -1; echo end")
check "the state directory and another task's workspace are out of reach" '[[ $out != *B-SECRET-CONTENT* && $out == *"No such file"* ]]' "$out"
# a bind's root field (4th) and a mount's source name where it comes from on the host
build_dir=$(dirname "$CAE")
host_paths() { # the mount table lines of $1 that name a host path (root field, source)
	awk -v w="$work" -v s="$state_dir" -v b="$build_dir" -v x="${2:-}" '
		function host(p) { return (index(p, w) == 1 || index(p, s) == 1 || index(p, b) == 1 ||
			p ~ /^\/(tmp|var\/tmp|root|home)(\/|$)/) && (x == "" || index(p, x) != 1) }
		FNR == NR { for (i = 7; $i != "-"; i++); if (host($4) || host($(i + 2))) print; next }
		host($1) { print }' <(sed -n '/^--mountinfo/,/^--mounts/p' <<<"$1" | sed '1d;$d') \
		<(sed -n '/^--mounts/,$p' <<<"$1" | sed 1d)
}
out=$(run C 'echo --mountinfo; cat /proc/self/mountinfo; echo --mounts; cat /proc/self/mounts')
leak=$(host_paths "$out")
check "mountinfo and mounts name no host path (state directory, workspace, build tree, /tmp, /var/tmp, /root, /home)" \
	'[[ $out == *" /workspace "* && -z $leak ]]' "$leak"
# a workspace used as is: its own path within its file system stays visible (docs/security.md)
out=$(run A 'echo --mountinfo; cat /proc/self/mountinfo; echo --mounts; cat /proc/self/mounts')
leak=$(host_paths "$out" "$work/a")
check "with a workspace used as is, mountinfo names neither the state directory nor the build tree" \
	'[[ $out == *" /workspace/project "* && -z $leak ]]' "$leak"
ln -sf /etc/shadow "$work/a/shadow-link"
out=$(run A 'cat shadow-link 2>&1; echo end')
check "a symlink to a host file leads nowhere inside" '[[ $out != *root:* ]]' "$out"

# --- system calls (the seccomp filter), the kernel's keys, the helper ---------------------
check "the result says the sandbox has a seccomp filter" '[ "$(jq -r .limits.seccomp "$work/a.json")" = true ]' "$(jq -c .limits "$work/a.json")"
cp "$here/syscalls.c" "$work/a/syscalls.c"
out=$(run A 'gcc -O0 -o cae-sys syscalls.c 2>&1 && echo built; grep "^Seccomp:" /proc/self/status' 120)
check "a program compiled inside runs under a seccomp filter (Seccomp: 2)" '[[ $out == *built* && $out == *"Seccomp:"*2* ]]' "$out"
out=$(run A './cae-sys; echo end')
for call in keyctl add_key request_key bpf perf_event_open userfaultfd io_uring_setup \
	io_uring_enter io_uring_register kexec_load kexec_file_load init_module finit_module \
	delete_module clock_settime clock_adjtime adjtimex settimeofday name_to_handle_at \
	open_by_handle_at personality_addr_no_randomize personality_read_implies_exec \
	unshare_newuser unshare_newns clone_newuser setns mount fsopen open_tree pivot_root \
	swapon reboot acct quotactl $([ "$(uname -m)" = x86_64 ] && echo i386_keyctl i386_stime \
	i386_personality x32_keyctl); do
	grep -qx "$call=EPERM" <<<"$out" || bad_calls+=" $(grep "^$call=" <<<"$out" || echo "$call=missing")"
done
check "each system call Docker's default profile refuses fails with EPERM (native, i386, x32)" '[ -z "${bad_calls:-}" ]' "${bad_calls:-}"
check "clone3 fails with ENOSYS (libc falls back to clone, whose flags are checked)" 'grep -qx "clone3=ENOSYS" <<<"$out"' "$out"
out=$(run A './cae-sys allowed; strace -f -o /dev/null true && echo strace-ok; gdb -batch -ex run --args /bin/echo gdb-ran 2>&1; echo alive' 120)
check "the sandbox survives, and what must work still does (personality query, clone, ptrace of a child of ours, strace, gdb)" \
	'[[ $out == *alive* ]] && for c in personality_query personality_linux clone_plain ptrace_own_child; do grep -qx "$c=ok" <<<"$out" || exit 1; done && [[ $out == *strace-ok* && $out == *gdb-ran*"exited normally"* ]]' "$out"
# (one command: each `cae exec` has a sandbox, and a helper, of its own)
out=$(run A 'for p in /proc/[0-9]*; do [ "$(tr -d "\0" < $p/cmdline 2>/dev/null)" = /.cae/cae-helper ] && h=${p#/proc/}; done; echo "helper=${h:-none}"; ./cae-sys ptrace "${h:-0}"; echo end')
check "the sandbox's helper can be neither traced nor read through /proc (environ, mem, fd)" \
	'[[ $out != *helper=none* && $out == *ptrace_attach=* && $out == *end* ]] && ! grep -q "=ok$" <<<"$out"' "$out"
out=$(run A './cae-sys ptrace 1; python3 -c "import os, signal; os.kill(1, signal.SIGSTOP); os.kill(1, signal.SIGKILL)"; sleep 1; echo "pid1=$(tr -d "\0" < /proc/1/cmdline) state=$(cut -d" " -f3 /proc/1/stat)"; echo end')
check "PID 1 of the sandbox is its helper, and can be neither traced, read through /proc, stopped nor killed" \
	'[[ $out == *ptrace_attach=* && $out == *"pid1=/.cae/cae-helper state=S"* && $out == *end* ]] && ! grep -q "=ok$" <<<"$out"' "$out"
check "the helper still serves after that" '[[ $(run A "echo alive") == alive* ]]'
# A key of the caller's, in the session keyring cae runs with.
secret_key=$(keyctl add user cae-attack-secret KEYRING-SECRET-VALUE @s)
out=$(run A "keyctl print $secret_key 2>&1; keyctl update $secret_key pwned 2>&1; keyctl show @s 2>&1; grep cae-attack-secret /proc/keys; echo end")
check "the caller's session keyring can be neither read, written nor seen" \
	'[[ $out != *KEYRING-SECRET-VALUE* && $out != *cae-attack-secret* ]] && [ "$(keyctl print "$secret_key")" = KEYRING-SECRET-VALUE ]' "$out"
# Whatever the filter: the sandbox's first step joins a new session keyring, before bwrap
# (here without the filter, so that the keyring can be looked at from inside).
host_ses=$(keyctl show @s | awk 'NR == 2 {print $1}')
ses_a=$("$CAE_HELPER" --enter --user 100000:100000 -- /usr/bin/keyctl show @s 2>&1 | awk 'NR == 2 {print $1}')
ses_b=$("$CAE_HELPER" --enter --user 100000:100000 -- /usr/bin/keyctl show @s 2>&1 | awk 'NR == 2 {print $1}')
check "each sandbox has a session keyring of its own (not the caller's, not another's)" \
	'[[ $ses_a =~ ^[0-9]+$ && $ses_b =~ ^[0-9]+$ && $ses_a != "$ses_b" && $ses_a != "$host_ses" && $ses_b != "$host_ses" ]]' \
	"caller=$host_ses A=$ses_a B=$ses_b"
# The first step's staging namespace, where bwrap's own starts, keeps no copy of what is
# mounted below the state directory (--hide): no other environment's workspace, whose file
# system a copy would keep after a restore put another in its place.
hide_dir=$(mktemp -d "$work/hide.XXXXXX")
mkdir "$hide_dir/ws" "$hide_dir/other"
mount -t tmpfs cae-attack-hide "$hide_dir/other"
out=$("$CAE_HELPER" --enter --stage /sys "$hide_dir/ws" --hide "$hide_dir" -- /bin/cat /proc/self/mountinfo 2>&1)
# the same state directory named through a symbolic link (the mount table has its real path)
ln -s "$hide_dir" "$work/hide-link"
out_link=$("$CAE_HELPER" --enter --stage /sys "$hide_dir/ws" --hide "$work/hide-link/" -- /bin/cat /proc/self/mountinfo 2>&1)
umount "$hide_dir/other"
check "a sandbox's staging namespace holds no mount below the state directory (--hide)" \
	'[[ $out == *" /sys/0 "* && $out != *cae-attack-hide* ]]' "$out"
check "... nor when the state directory is named through a symbolic link" \
	'[[ $out_link == *" /sys/0 "* && $out_link != *cae-attack-hide* ]]' "$out_link"

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


# --- the workspace's total disk use (disk_limit 64 MiB) -------------------------------------
check "the result says what bounds the disk (its own file system)" \
	'[ "$(jq -r .limits.disk.mechanism "$work/c.json")" = loopfs ]' "$(jq -c .limits.disk "$work/c.json")"
check "a workspace used as is is not bounded, and the warnings say so" \
	'[ "$(jq -r .limits.disk.mechanism "$work/a.json")" = none ] && jq -r ".warnings[]" "$work/a.json" | grep -q "total disk use is not bounded"' \
	"$(jq -c '[.limits.disk, .warnings]' "$work/a.json")"
avail_before=$(df -B1 --output=avail "$state_dir" | tail -1)
out=$(run C 'touch one; fallocate -l 700M --keep-size one; echo "keep=$?"; fallocate -l 700M two; echo "plain=$?"; du -sm . | cut -f1' 120)
avail_after=$(df -B1 --output=avail "$state_dir" | tail -1)
out=$out$(run C 'rm -f one two; for i in 1 2 3; do head -c 40000000 /dev/zero > w$i; echo "w$i=$?"; done; du -sm . | cut -f1' 120)
used=$(du -sxB1 "$state_dir/local/C" | cut -f1)
check "fallocate --keep-size past disk_limit is refused (ENOSPC)" '[[ $out == *keep=1* && $out == *"No space left"* ]]' "$out"
check "fallocate past disk_limit is refused" '[[ $out == *plain=1* || $out == *plain=153* ]]' "$out"
check "plain writes past disk_limit fail with ENOSPC" '[[ $out == *w1=0* && $out == *w3=1* ]]' "$out"
check "the environment takes at most disk_limit of the host's disk (${used} bytes)" '[ "$used" -le $((66 << 20)) ]' "$(du -shx "$state_dir/local/C"/* 2>&1)"
check "the host's free space is not taken (before $avail_before, after $avail_after)" \
	'[ $((avail_before - avail_after)) -lt $((300 << 20)) ]'
out=$(run D 'head -c 20000000 /dev/zero > w; echo "w=$?"; rm -f w' 60)
out2=$(run A 'head -c 20000000 /dev/zero > w; echo "w=$?"; rm -f w' 60)
check "other environments are unaffected by a full one" '[[ $out == *w=0* && $out2 == *w=0* ]]' "$out $out2"
"$CAE" cleanup --backend local A >/dev/null 2>&1
check "after cleanup a workspace root owns is still root's, and root's git works on it" \
	'[ "$(stat -c %u:%g "$work/a" "$work/a/owned-by.txt" "$work/a/made/sub" | sort -u)" = 0:0 ] && git -C "$work/a" status --short >/dev/null 2>&1' \
	"$(stat -c "%u:%g %n" "$work/a" "$work/a/owned-by.txt"; git -C "$work/a" status 2>&1 | head -3)"
"$CAE" cleanup --backend local C >/dev/null 2>&1
check "cleanup leaves no mount, no loop device and no image" \
	'! grep -q "$state_dir/local/C" /proc/self/mountinfo && ! grep -qs "$state_dir/local/C" /sys/block/loop*/loop/backing_file && [ ! -e "$state_dir/local/C" ]' \
	"$(grep "$state_dir" /proc/self/mountinfo /sys/block/loop*/loop/backing_file)"
# --- a filtered network (command_executor.docker.network.whitelist_mode) ----------------------
# Environment N: an allow-list. Named hosts are served on this host's loopback: cae runs in a
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
mkdir -p "$work/n"
# netcae ARGS...: cae with the allow-list, in a mount namespace with the test's /etc/hosts
netcae() {
	unshare -m --propagation private sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' \
		"$work/hosts" env CAE_CONFIG="$work/net.yaml" "$CAE" "$@"
}
netcae prepare --workspace "$work/n" --uuid N > "$work/n.json" 2>/dev/null || echo "prepare N failed"
netrun() { netcae exec --uuid N --timeout 60 -- "$1" 2>/dev/null; }
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
