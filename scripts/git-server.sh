#!/usr/bin/env bash
# A loopback git server for the clone tests: serves the bare repositories under DIR.
#
#   scripts/git-server.sh start DIR [DAEMON_PORT [HTTP_PORT]]
#   scripts/git-server.sh stop DIR
#
# `start` runs, on 127.0.0.1 only:
#   - git daemon (git://, anonymous, fetch and push: --export-all --enable=receive-pack);
#   - smart HTTP through nginx + fcgiwrap + git http-backend, with basic auth: the users
#     x-access-token (GitHub style) and oauth2 (GitLab style), password = the token in
#     CAE_TEST_GIT_TOKEN (a random one when unset). Push works for authenticated users.
#     The same repositories are also served read-only without auth under /public/.
# and prints, once both answer:
#   GIT_DAEMON_URL=git://127.0.0.1:P/
#   GIT_HTTP_URL=http://127.0.0.1:P2/
#   GIT_HTTP_PUBLIC_URL=http://127.0.0.1:P2/public/
#   GIT_HTTP_TOKEN=<token>
# so a repository DIR/repo.git is git://127.0.0.1:P/repo.git and
# http://x-access-token:TOKEN@127.0.0.1:P2/repo.git. Ports are free ones picked at random
# unless given (as arguments, or CAE_GIT_DAEMON_PORT / CAE_GIT_HTTP_PORT; 0 = random); a
# given port in use is an error. Starting a server for a DIR that already has one prints its
# lines again. `stop` ends the processes started for DIR and removes their state. A failed
# start leaves nothing running. (One DIR, one caller at a time: there is no lock.)
#
# Nothing global is touched: the nginx configuration, pid files, sockets and logs live in a
# state directory under ${TMPDIR:-/tmp}; it works as root or as any user. nginx, fcgiwrap
# and openssl are installed with apt-get when missing (root only).
set -euo pipefail

say() { echo "git-server: $*" >&2; }
die() { say "$*"; exit 1; }

usage() { echo "usage: $0 start DIR [DAEMON_PORT [HTTP_PORT]] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2
case "$cmd" in start|stop) ;; *) usage ;; esac

root=$(realpath -m -- "$dir")
state=${TMPDIR:-/tmp}/cae-git-server.$(printf '%s' "$root" | sha256sum | cut -c1-16)

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A free port: random in 20000-59999, not listening now.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    [ -n "$(ss -Htln "sport = :$p" 2>/dev/null)" ] && continue
    port_open "$p" && continue
    echo "$p"; return 0
  done
  return 1
}

# True while process $1 runs (a zombie waiting for its new parent to reap it does not).
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# Sends TERM to the pid in file $1 when that process is named $2, waits up to 5 s.
stop_pidfile() {
  local f=$1 name=$2 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      alive "$pid" || break
      sleep 0.1
    done
    if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$f"
}

cmd_stop() {
  [ -d "$state" ] || { say "no server for $root"; return 0; }
  stop_pidfile "$state/nginx.pid" nginx
  stop_pidfile "$state/fcgiwrap.pid" fcgiwrap
  stop_pidfile "$state/daemon.pid" git-daemon
  rm -rf -- "$state"
}

running() {
  [ -f "$state/env" ] || return 1
  local f name
  for f in nginx fcgiwrap daemon; do
    name=$f; [ $f = daemon ] && name=git-daemon
    [ -f "$state/$f.pid" ] && alive "$(cat "$state/$f.pid")" &&
      [ "$(cat "/proc/$(cat "$state/$f.pid")/comm" 2>/dev/null)" = "$name" ] || return 1
  done
}

install_missing() {
  local need=()
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
  command -v fcgiwrap >/dev/null || [ -x /usr/sbin/fcgiwrap ] || need+=(fcgiwrap)
  command -v openssl >/dev/null || need+=(openssl)
  [ ${#need[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "missing ${need[*]} (apt-get install ${need[*]} as root)"
  say "installing ${need[*]}"
  # RUNLEVEL=1: the packages must not start the system's nginx or fcgiwrap services.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq --no-install-recommends \
    "${need[@]}" >&2
}

# Waits up to 10 s for port $1 while process $2 lives; then checks that it still lives
# (a process that failed to bind and a stranger taking the port are told apart).
wait_port() {
  local port=$1 pid=$2
  for _ in $(seq 1 100); do
    alive "$pid" || return 1
    if port_open "$port"; then
      sleep 0.1
      alive "$pid"
      return
    fi
    sleep 0.1
  done
  return 1
}

stop_on_failure() {
  local rc=$?
  [ $rc -eq 0 ] || cmd_stop
}

cmd_start() {
  local dport=${3:-${CAE_GIT_DAEMON_PORT:-}} hport=${4:-${CAE_GIT_HTTP_PORT:-}}
  [ "$dport" != 0 ] || dport=
  [ "$hport" != 0 ] || hport=
  [ -d "$root" ] || die "$root is not a directory"
  if running; then
    cat "$state/env"; return 0
  fi
  [ -d "$state" ] && cmd_stop
  install_missing
  local nginx fcgiwrap backend gitdaemon token
  nginx=$(command -v nginx || echo /usr/sbin/nginx)
  fcgiwrap=$(command -v fcgiwrap || echo /usr/sbin/fcgiwrap)
  # The programs themselves, not the `git` wrapper, so that the pid files name them.
  backend=$(git --exec-path)/git-http-backend
  gitdaemon=$(git --exec-path)/git-daemon
  if [ ! -x "$backend" ] || [ ! -x "$gitdaemon" ]; then
    die "no git-http-backend or git-daemon in $(git --exec-path)"
  fi
  token=${CAE_TEST_GIT_TOKEN:-$(openssl rand -hex 20)}

  mkdir -p "$state/tmp"
  # nginx's workers run as nobody when started as root: they must reach the socket and files.
  chmod 755 "$state" "$state/tmp"
  # Whatever fails from here on leaves nothing running.
  trap 'stop_on_failure' EXIT

  # git daemon. Repositories of another owner are fine (safe.directory) for this test server.
  local dp_fixed=$dport
  for _ in 1 2 3 4 5; do
    if [ -z "$dp_fixed" ]; then
      dport=$(free_port) || die "no free port"
    elif port_open "$dport"; then
      die "port $dport is in use"
    fi
    GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*' \
      setsid "$gitdaemon" --reuseaddr --base-path="$root" --export-all --enable=receive-pack \
        --informative-errors --listen=127.0.0.1 --port="$dport" \
        </dev/null >>"$state/daemon.log" 2>&1 &
    echo $! >"$state/daemon.pid"
    wait_port "$dport" "$!" && break
    stop_pidfile "$state/daemon.pid" git-daemon
    [ -z "$dp_fixed" ] || die "git daemon did not start on port $dport: $(tail -n 3 "$state/daemon.log")"
  done
  port_open "$dport" || die "git daemon did not start: $(tail -n 3 "$state/daemon.log")"

  # fcgiwrap on a unix socket in the state directory; one process (no preforked children
  # to outlive it), each request's git-http-backend its child.
  setsid "$fcgiwrap" -s "unix:$state/fcgiwrap.sock" </dev/null >>"$state/fcgiwrap.log" 2>&1 &
  echo $! >"$state/fcgiwrap.pid"
  for _ in $(seq 1 50); do [ -S "$state/fcgiwrap.sock" ] && break; sleep 0.1; done
  [ -S "$state/fcgiwrap.sock" ] || die "fcgiwrap did not start: $(tail -n 3 "$state/fcgiwrap.log")"
  chmod 666 "$state/fcgiwrap.sock"

  # Basic auth users, hashed with apr1 (the token is never on a command line).
  local hash
  hash=$(printf '%s\n' "$token" | openssl passwd -apr1 -stdin)
  printf 'x-access-token:%s\noauth2:%s\n' "$hash" "$hash" >"$state/htpasswd"
  chmod 644 "$state/htpasswd"

  local hp_fixed=$hport
  for _ in 1 2 3 4 5; do
    if [ -z "$hp_fixed" ]; then
      hport=$(free_port) || die "no free port"
    elif port_open "$hport"; then
      die "port $hport is in use"
    fi
    write_nginx_conf "$hport" "$backend"
    "$nginx" -e "$state/error.log" -p "$state/" -c "$state/nginx.conf" -t -q >>"$state/nginx.log" 2>&1 ||
      die "bad nginx configuration: $(tail -n 3 "$state/nginx.log")"
    setsid "$nginx" -e "$state/error.log" -p "$state/" -c "$state/nginx.conf" \
      </dev/null >>"$state/nginx.log" 2>&1 &
    local npid=$!
    if wait_port "$hport" "$npid"; then
      echo "$npid" >"$state/nginx.pid"
      break
    fi
    kill -TERM "$npid" 2>/dev/null || true
    wait "$npid" 2>/dev/null || true
    [ -z "$hp_fixed" ] || die "nginx did not start on port $hport: $(tail -n 3 "$state/error.log")"
  done
  [ -f "$state/nginx.pid" ] || die "nginx did not start: $(tail -n 3 "$state/error.log")"

  {
    echo "GIT_DAEMON_URL=git://127.0.0.1:$dport/"
    echo "GIT_HTTP_URL=http://127.0.0.1:$hport/"
    echo "GIT_HTTP_PUBLIC_URL=http://127.0.0.1:$hport/public/"
    echo "GIT_HTTP_TOKEN=$token"
  } >"$state/env"
  chmod 600 "$state/env"
  trap - EXIT
  cat "$state/env"
}

write_nginx_conf() {
  local port=$1 backend=$2
  cat >"$state/nginx.conf" <<EOF
# Generated by scripts/git-server.sh for $root
daemon off;
master_process on;
worker_processes 1;
pid $state/nginx.pid.master;
error_log $state/error.log warn;
events { worker_connections 64; }
http {
  access_log $state/access.log;
  client_body_temp_path $state/tmp/body;
  fastcgi_temp_path $state/tmp/fastcgi;
  proxy_temp_path $state/tmp/proxy;
  uwsgi_temp_path $state/tmp/uwsgi;
  scgi_temp_path $state/tmp/scgi;
  client_max_body_size 0;
  server {
    listen 127.0.0.1:$port;
    server_name localhost;
    location ~ ^/public(/.*)\$ {
      include $state/git-fastcgi.conf;
      fastcgi_param PATH_INFO \$1;
      fastcgi_param REMOTE_USER "";
    }
    location / {
      auth_basic "git";
      auth_basic_user_file $state/htpasswd;
      include $state/git-fastcgi.conf;
      fastcgi_param PATH_INFO \$uri;
      fastcgi_param REMOTE_USER \$remote_user;
    }
  }
}
EOF
  cat >"$state/git-fastcgi.conf" <<EOF
fastcgi_pass unix:$state/fcgiwrap.sock;
fastcgi_read_timeout 300s;
fastcgi_param SCRIPT_FILENAME $backend;
fastcgi_param GIT_PROJECT_ROOT $root;
fastcgi_param GIT_HTTP_EXPORT_ALL "";
fastcgi_param GIT_PROTOCOL \$http_git_protocol;
fastcgi_param GIT_CONFIG_COUNT 1;
fastcgi_param GIT_CONFIG_KEY_0 safe.directory;
fastcgi_param GIT_CONFIG_VALUE_0 *;
fastcgi_param QUERY_STRING \$query_string;
fastcgi_param REQUEST_METHOD \$request_method;
fastcgi_param CONTENT_TYPE \$content_type;
fastcgi_param CONTENT_LENGTH \$content_length;
fastcgi_param SERVER_PROTOCOL \$server_protocol;
fastcgi_param REMOTE_ADDR \$remote_addr;
EOF
}

case "$cmd" in
  start) cmd_start "$@" ;;
  stop) cmd_stop ;;
esac
