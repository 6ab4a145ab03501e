#!/usr/bin/env bash
# The filtered network of a container backend, through the built `cae` as an agent's commands
# meet it: an allow-list (command_executor.docker.network.whitelist_mode), the environment's
# helper listening on its loopback and carrying each connection over its stream to cae's
# proxy. Named hosts are served on this host's loopback: cae runs in a mount namespace of its
# own whose /etc/hosts names them (the proxy resolves names, the environment does not), and
# allowed_addresses lets the proxy reach 127.0.0.1 only. Also: port forwards.
#
#   tests/net/net-backend.sh docker|kubernetes [path/to/cae]
#
# Prints "ok N - ..." / "not ok N - ..." and ends with "N passed, N failed". Removes only the
# environments it prepared.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
backend=${1:?backend}
CAE=$(realpath "${2:-$here/../../build/cae}")
if [ "$backend" = kubernetes ] && [ -z "${CAE_TEST_K8S:-}" ]; then
	echo "skipped: CAE_TEST_K8S is not set"
	exit 77
fi

mkdir -p /var/tmp
work=$(mktemp -d /var/tmp/cae-net-XXXXXX)
uuid=net-$backend-$$
web_pid=
cleanup() {
	CAE_CONFIG=$work/net.yaml "$CAE" cleanup --backend "$backend" "$uuid" >/dev/null 2>&1
	[ -n "${uuid2:-}" ] && CAE_CONFIG=$work/net.yaml "$CAE" cleanup --backend "$backend" "$uuid2" >/dev/null 2>&1
	if [ -n "${uuid3:-}" ]; then
		CAE_CONFIG=$work/pool.yaml "$CAE" cleanup --backend "$backend" "$uuid3" >/dev/null 2>&1
		CAE_CONFIG=$work/pool.yaml "$CAE" pool drain >/dev/null 2>&1
	fi
	[ -n "$web_pid" ] && kill "$web_pid" 2>/dev/null
	[ -n "${kube_pid:-}" ] && kill "$kube_pid" 2>/dev/null
	[ -n "${other_pid:-}" ] && kill "$other_pid" 2>/dev/null
	[ -d "$work/git" ] && "$here/../../scripts/git-server.sh" stop "$work/git" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

passed=0 failed=0 n=0
ok() { n=$((n + 1)); passed=$((passed + 1)); echo "ok $n - $1"; }
bad() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && printf '#   %s\n' "$2" | head -20; }
check() { # name, condition (shell), detail
	if eval "$2"; then ok "$1"; else bad "$1" "${3:-}"; fi
}

export CAE_STATE_DIR=$work/state
mkdir -p "$work/www"
for p in plain tunnel socks; do echo "NET-OK /$p" > "$work/www/$p"; done
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
# The test cluster (scripts/k8s-env.sh) has no CNI: its pods run on the host network (the
# same settings as the kubernetes suites'), so what isolation would give there (no route
# but the helper's) cannot be shown; the proxy's path through the exec stream can.
mode=bridge # (the default: a filtered network makes it none)
[ "$backend" = kubernetes ] && mode=host
cat > "$work/net.yaml" <<YAML
command_executor:
  backend: $backend
  docker:
    network:
      mode: $mode
      whitelist_mode: true
      allowed_domains: [allowed.test, loop.test]
      allowed_addresses: [127.0.0.1/32]
  kubernetes:
    namespace: default
    node_name: localhost
    image_pull_policy: Never
YAML
# netcae ARGS...: cae with the allow-list, in a mount namespace with the test's /etc/hosts
netcae() {
	unshare -m --propagation private sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' \
		"$work/hosts" env CAE_CONFIG="$work/net.yaml" "$CAE" "$@"
}
git init -q "$work/repo" && echo "net" > "$work/repo/README" && git -C "$work/repo" add README &&
	git -C "$work/repo" -c user.name=t -c user.email=t@t commit -qm first &&
	git clone -q --bare "$work/repo" "$work/git/repo.git"
repo=$work/repo
# (a pod clones over the network only: the repository served by the loopback git server)
if [ "$backend" = kubernetes ]; then
	git_urls=$("$here/../../scripts/git-server.sh" start "$work/git") || { echo "git server failed"; exit 1; }
	repo=$(sed -n 's/^GIT_HTTP_PUBLIC_URL=//p' <<<"$git_urls")repo.git
fi
# (prepared outside the mount namespace: the workspace's file system cae mounts must be
# seen by the engine)
CAE_CONFIG=$work/net.yaml "$CAE" prepare --backend "$backend" --repo "$repo" --uuid "$uuid" > "$work/prep.json" 2>"$work/prep.err" ||
	{ echo "prepare failed: $(cat "$work/prep.err" "$work/prep.json")"; exit 1; }
netrun() { netcae exec --backend "$backend" --uuid "$uuid" --timeout 60 -- "$1" 2>/dev/null; }

# kubernetes: the NetworkPolicy denying the pod's egress, named as the pod, selecting it by its
# own label; the test cluster has no CNI (nothing enforces it: the warning says so)
if [ "$backend" = kubernetes ]; then
	pod=$(kubectl get pods -n default -l "cae.task_uuid=$uuid" -o json | jq -c '.items[0].metadata | {name, egress: .labels["cae.egress"]}')
	pname=$(jq -r .name <<<"$pod")
	np=$(kubectl get networkpolicy -n default "$pname" -o json 2>&1)
	check "the pod has a NetworkPolicy denying all its egress, selecting the pod by its own label" \
		'[ "$(jq -c "[.spec.podSelector.matchLabels, .spec.policyTypes, (.spec.egress // [])]" <<<"$np")" = "[{\"cae.egress\":$(jq .egress <<<"$pod")},[\"Egress\"],[]]" ] && [ "$(jq -r .egress <<<"$pod")" = "$pname" ]' "$pod $np"
	check "the prepare says the policy exists but may not be enforced" \
		'grep -q "NetworkPolicy $pname denies the pod.s egress.*cae cannot tell whether this cluster.s does" "$work/prep.json"' "$(cat "$work/prep.json")"
fi

if [ "$backend" = docker ]; then
	mode=$(docker inspect -f '{{.HostConfig.NetworkMode}}' "$(jq -r '.container_id // .id // empty' "$work/prep.json")" 2>/dev/null ||
		docker ps -a --filter "name=$uuid" --format '{{.ID}}' | head -1 | xargs docker inspect -f '{{.HostConfig.NetworkMode}}')
	check "the allow-listed container has network none" '[ "$mode" = none ]' "$mode $(cat "$work/prep.json")"
fi
res=$(netrun "env | grep -i _proxy= | sort; curl -sS -m 10 http://allowed.test:$wport/plain; curl -sS -m 10 -p http://allowed.test:$wport/tunnel; curl -sS -m 10 -x \"\$ALL_PROXY\" http://allowed.test:$wport/socks")
out=$(jq -r '.stdout + .stderr' <<<"$res")
check "the proxy variables are in the command's environment, both cases" \
	'[[ $out == *"HTTP_PROXY=http://127.0.0.1:3128"* && $out == *"https_proxy=http://127.0.0.1:3128"* && $out == *"ALL_PROXY=socks5h://127.0.0.1:1080"* && $out == *"no_proxy="* ]]' "$res"
check "an allowed name is reached through the proxy variables (HTTP, CONNECT, SOCKS5)" \
	'[[ $out == *"NET-OK /plain"* && $out == *"NET-OK /tunnel"* && $out == *"NET-OK /socks"* ]] && [ "$(jq -r ".network_denied // empty" <<<"$res")" = "" ]' "$res"
res=$(netrun "curl -sS -m 10 http://denied.test:$wport/x; echo; curl -sS -m 10 -x \"\$ALL_PROXY\" http://denied.test:$wport/y; echo end")
out=$(jq -r '.stdout + .stderr' <<<"$res")
check "a name not listed gets the policy's 403 text, SOCKS5 a refusal" \
	'[[ $out == *"blocked by cae network policy: denied.test is not in allowed_domains"* && $out != *NET-OK* && $out == *"SOCKS5 connection to denied.test. (2)"* ]]' "$res"
check "the command result reports what was refused (network_denied)" \
	'[ "$(jq -c "[.network_denied[] | [.host, .port, .count]]" <<<"$res")" = "[[\"denied.test\",$wport,2]]" ]' "$res"
res=$(netrun "curl -sS -m 10 -x http://127.0.0.1:3128 http://127.0.0.2:$wport/lit; echo; curl -sS -m 10 http://loop.test:$wport/loop; echo end")
out=$(jq -r '.stdout + .stderr' <<<"$res")
check "an IP literal and a name resolving to loopback outside allowed_addresses are refused" \
	'[[ $out == *"127.0.0.2 is an IP address, not in allowed_addresses"* && $out == *"loop.test resolves to 127.0.0.3, a loopback address not in allowed_addresses"* && $out != *NET-OK* ]]' "$res"
res=$(netrun "curl -sS -m 5 --noproxy '*' http://allowed.test:$wport/direct; curl -sS -m 5 --noproxy '*' http://127.0.0.1:$wport/direct; python3 -c '
import socket
s = socket.socket(); s.settimeout(3)
try:
    s.connect((\"127.0.0.1\", $wport)); print(\"CONNECTED\")
except OSError as e:
    print(\"raw socket refused\", e)
'; echo end")
out=$(jq -r '.stdout + .stderr' <<<"$res")
if [ "$backend" = docker ]; then
	check "no way round the proxy (--noproxy, a raw socket to the host's 127.0.0.1)" \
		'[[ $out != *NET-OK* && $out != *CONNECTED* && $out == *"raw socket refused"* && $out == *end* ]]' "$res"
fi

# docker, an engine on this host: the helper hands its listeners to cae over a unix socket
# in the container's own directory (src/backend/net-handover.h). What an agent could try
# with that directory: write to it, list it, reach another environment's socket through it
# (one made here, in a directory beside its own, recording whoever connects) or by the
# host's path; and the allow-list holds for connections through the new path.
if [ "$backend" = docker ]; then
	hdir=$CAE_STATE_DIR/net/$uuid
	other=$CAE_STATE_DIR/net/$uuid-other
	mkdir -p "$other" && chmod 0711 "$other"
	python3 - "$other/p-0123456789abcdef" "$work/other-hit" <<'PY' &
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); s.listen(8)
while True:
    c, _ = s.accept()
    open(sys.argv[2], "a").write("connected\n")
    c.close()
PY
	other_pid=$!
	for _ in $(seq 50); do [ -S "$other/p-0123456789abcdef" ] && break; sleep 0.1; done
	res=$(CAE_LOG_LEVEL=debug netcae exec --backend docker --uuid "$uuid" --timeout 60 -- "grep ' /run/cae-net ' /proc/self/mountinfo | cut -d' ' -f4,5,6; touch /run/cae-net/x 2>&1; ls -A /run/cae-net 2>&1 | sed 's/^/listing: /'; find / \\( -path /proc -o -path /sys \\) -prune -o -type s -name 'p-*' -print 2>/dev/null | sed 's/^/socket: /'; python3 -c '
import socket
for p in (\"/run/cae-net/../$uuid-other/p-0123456789abcdef\", \"/run/cae-net/$uuid-other/p-0123456789abcdef\", \"$other/p-0123456789abcdef\", \"/run/cae-net/p-0123456789abcdef\"):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); print(\"REACHED\", p)
    except OSError as e:
        print(\"unreachable\", e.strerror)
'; curl -sS -m 10 http://allowed.test:$wport/plain; curl -sS -m 10 http://denied.test:$wport/x; echo end" 2>"$work/hand.err")
	out=$(jq -r '.stdout + .stderr' <<<"$res")
	check "the container's proxy connections come through the handed-over listeners, not the stream" \
		'grep -q "\"event\":\"docker.network_path\".*\"path\":\"socket\"" "$work/hand.err"' "$(grep -i network "$work/hand.err")"
	check "the allow-list holds through them: an allowed name answers, a denied one gets the 403 text" \
		'[[ $out == *"NET-OK /plain"* && $out == *"blocked by cae network policy: denied.test is not in allowed_domains"* ]]' "$res"
	check "the container has its own directory only, read-only, empty while it runs (not even listable)" \
		'[[ $out == *"/net/$uuid /run/cae-net ro,"* && $out == *"Read-only file system"* && $out == *"listing: ls: cannot open directory"* && $out != *socket:* ]] && [ -z "$(ls -A "$hdir")" ]' "$res $(ls -la "$hdir")"
	check "another environment's socket cannot be reached from the container, by any path" \
		'[[ $(grep -c "^unreachable No such file or directory" <<<"$out") == 4 && $out != *REACHED* ]] && [ ! -e "$work/other-hit" ]' "$res"
	# the fallback (as with a remote engine): no directory, so the stream's tunnels
	mv "$hdir" "$hdir.off"
	res=$(CAE_LOG_LEVEL=debug netcae exec --backend docker --uuid "$uuid" --timeout 60 -- "curl -sS -m 10 http://allowed.test:$wport/plain; curl -sS -m 10 http://denied.test:$wport/x; echo end" 2>"$work/fall.err")
	mv "$hdir.off" "$hdir"
	out=$(jq -r '.stdout + .stderr' <<<"$res")
	check "without the directory the stream carries them, under the same allow-list" \
		'[[ $out == *"NET-OK /plain"* && $out == *"denied.test is not in allowed_domains"* ]] && ! grep -q network_path "$work/fall.err"' "$res $(cat "$work/fall.err")"
	# a container of the warm pool, made before its task: its directory is named as the
	# container (its label says which), and goes with it
	{ cat "$work/net.yaml"; printf '  pool:\n    size: 1\n'; } > "$work/pool.yaml"
	uuid3=$uuid-pool
	CAE_CONFIG=$work/pool.yaml "$CAE" pool fill >"$work/fill.out" 2>&1
	CAE_CONFIG=$work/pool.yaml CAE_LOG_LEVEL=debug "$CAE" prepare --backend docker --repo "$repo" --uuid "$uuid3" >"$work/prep3.json" 2>"$work/prep3.err"
	pdir=$(docker ps -q --filter "name=coding-agent-exec-$uuid3" | head -1 | xargs -r docker inspect -f '{{index .Config.Labels "cae.net_dir"}}')
	res=$(CAE_LOG_LEVEL=debug netcae exec --backend docker --uuid "$uuid3" --timeout 60 -- "grep ' /run/cae-net ' /proc/self/mountinfo | cut -d' ' -f4; curl -sS -m 10 http://allowed.test:$wport/plain; curl -sS -m 10 http://denied.test:$wport/x; echo end" 2>"$work/pool.err")
	out=$(jq -r '.stdout + .stderr' <<<"$res")
	check "a container claimed from the warm pool: its own directory, the handover, the allow-list" \
		'grep -q "\"event\":\"pool.claimed\"" "$work/prep3.err" && [[ $pdir == pool@coding-agent-pool-* && $out == *"/net/$pdir"* && $out == *"NET-OK /plain"* && $out == *"denied.test is not in allowed_domains"* ]] && grep -q "\"path\":\"socket\"" "$work/pool.err"' "pdir: $pdir $res $(cat "$work/fill.out" "$work/prep3.err" "$work/pool.err")"
	CAE_CONFIG=$work/pool.yaml "$CAE" cleanup --backend docker "$uuid3" >/dev/null 2>&1
	check "its directory goes with it" '[ -n "$pdir" ] && [ ! -e "$CAE_STATE_DIR/net/$pdir" ]' "$(ls -la "$CAE_STATE_DIR/net")"
	# what a cae that died left: gc removes a directory whose container is gone, not one
	# whose container runs
	mkdir "$CAE_STATE_DIR/net/$uuid-gone" "$CAE_STATE_DIR/net/pool@coding-agent-pool-gone"
	touch -d '-2 min' "$CAE_STATE_DIR/net/$uuid-gone" "$CAE_STATE_DIR/net/pool@coding-agent-pool-gone" "$hdir"
	CAE_CONFIG=$work/net.yaml "$CAE" gc --backend docker >"$work/gc.out" 2>&1
	check "gc removes the handover directories of containers that are gone, not a live one's" \
		'[ ! -e "$CAE_STATE_DIR/net/$uuid-gone" ] && [ ! -e "$CAE_STATE_DIR/net/pool@coding-agent-pool-gone" ] && [ -d "$hdir" ]' "$(ls -la "$CAE_STATE_DIR/net"; cat "$work/gc.out")"
fi

# 10,000 connections in a loop (every other one refused) leave the proxy serving
res=$(netrun "python3 -c '
import socket
for i in range(10000):
    s = socket.create_connection((\"127.0.0.1\", 3128))
    if i % 2:
        s.sendall(b\"GET http://flood.test/ HTTP/1.0\\r\\n\\r\\n\"); s.recv(100)
    s.close()
print(\"looped\")
'; curl -sS -m 10 http://allowed.test:$wport/plain")
out=$(jq -r '.stdout + .stderr' <<<"$res")
check "10,000 connections in a loop, then an allowed name still answers" \
	'[[ $out == *looped*"NET-OK /plain"* ]] && [ "$(jq -c "[.network_denied[] | [.host, .count]]" <<<"$res")" = "[[\"flood.test\",5000]]" ]' "$res"

# --- port forwards: a server in the environment (network none) reached from this host ---------
# (a server the test starts beside cae's commands; `cae port-forward` carries each connection
# over the helper's stream to the environment's 127.0.0.1)
# (a port below the ephemeral range: the connection loop above leaves thousands of its
# ports in TIME_WAIT; the server's output in /workspace/fwd/server.log)
fport=$((20000 + $$ % 12000))
serve="mkdir -p /workspace/fwd && printf served-in-the-environment > /workspace/fwd/fwd.txt && cd /workspace/fwd && exec python3 -m http.server $fport --bind 127.0.0.1 >/workspace/fwd/server.log 2>&1"
serve_err=
if [ "$backend" = docker ]; then
	cid=$(docker ps -q --filter "label=cae.task_uuid=$uuid" | head -1)
	serve_err=$(docker exec -d -u 1000 "$cid" sh -c "$serve" 2>&1) || serve_err="docker exec -d failed: $serve_err"
else
	pod=$(kubectl get pods -A -l "cae.task_uuid=$uuid" -o jsonpath='{.items[0].metadata.namespace} {.items[0].metadata.name}')
	# (held by a kubectl exec of the test's: the pod's init ends what an ended exec leaves)
	kubectl exec -n "${pod% *}" -c main "${pod#* }" -- sh -c "$serve" </dev/null >/dev/null 2>&1 &
	kube_pid=$!
fi
# (until it answers inside the environment: a sanitized cae on a busy machine is slow to
# ask, and a forward to a port nobody listens on yet is closed at once, as it must be)
served=no
for _ in $(seq 300); do
	[ "$(netrun "curl -s -o /dev/null -w %{http_code} --noproxy '*' http://127.0.0.1:$fport/fwd.txt" | jq -r .stdout)" = 200 ] && { served=yes; break; }
	sleep 0.2
done
coproc FWD { CAE_CONFIG=$work/net.yaml exec "$CAE" port-forward --backend "$backend" "$uuid" "$fport" 2>"$work/fwd.err"; }
fwd_pid=$FWD_PID
fwd_json=
while IFS= read -r -t 30 line <&"${FWD[0]}"; do
	fwd_json+=$line
	[ "$line" = "}" ] && break
done
hport=$(jq -r '.host_port // empty' <<<"$fwd_json")
got=$( [ -n "$hport" ] && curl -sS -m 10 --noproxy '*' "http://127.0.0.1:$hport/fwd.txt" 2>&1)
check "cae port-forward reaches a server on the environment's loopback (docker: under network none)" \
	'[[ $(jq -r .host <<<"$fwd_json") == 127.0.0.1 && $got == served-in-the-environment ]]' \
	"server answering inside: $served ($serve_err; its log: $(netrun 'cat /workspace/fwd/server.log; ps -eo pid,args' | jq -r '.stdout + .stderr')); $fwd_json $got $(cat "$work/fwd.err")"
kill "$fwd_pid" 2>/dev/null
wait "$fwd_pid" 2>/dev/null
got=$( [ -n "$hport" ] && curl -sS -m 5 --noproxy '*' "http://127.0.0.1:$hport/fwd.txt" 2>&1)
check "the forward ends with the process that made it" '[[ -n $hport && $got != *served-in* ]]' "$got"

if [ "$backend" = kubernetes ]; then
	CAE_CONFIG=$work/net.yaml "$CAE" cleanup --backend "$backend" "$uuid" >/dev/null 2>&1
	check "cleanup removes the pod's NetworkPolicy" \
		'! kubectl get networkpolicy -n default "$pname" >/dev/null 2>&1 && [ -n "$pname" ]'
	# a prepare killed once its pod exists (a failed one): gc removes its pod and its policy
	uuid2=$uuid-gc
	(CAE_CONFIG=$work/net.yaml exec "$CAE" prepare --backend "$backend" --repo "$repo" --uuid "$uuid2" >/dev/null 2>&1) &
	prep_pid=$!
	for _ in $(seq 300); do
		[ -n "$(kubectl get pods -n default -l "cae.task_uuid=$uuid2" -o name 2>/dev/null)" ] && break
		sleep 0.1
	done
	kill -9 "$prep_pid" 2>/dev/null
	wait "$prep_pid" 2>/dev/null
	pname2=$(kubectl get pods -n default -l "cae.task_uuid=$uuid2" -o jsonpath='{.items[0].metadata.name}')
	had=$(kubectl get networkpolicy -n default "$pname2" -o name 2>&1)
	CAE_CONFIG=$work/net.yaml "$CAE" gc --backend "$backend" >"$work/gc.out" 2>&1
	left=$(kubectl get networkpolicy,pods -n default -o name 2>&1 | grep -F "/$pname2")
	check "gc of a failed prepare removes its pod and its NetworkPolicy" \
		'[ -n "$pname2" ] && [[ $had == *"networkpolicy"*"$pname2"* ]] && [ -z "$left" ]' "had: $had left: $left gc: $(cat "$work/gc.out")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
