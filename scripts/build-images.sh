#!/usr/bin/env bash
# Builds the language images (docker/Dockerfile-executor-*) on a machine with no container
# registry: the base image coding-agent-executor-base:latest is a Debian root filesystem made
# by debootstrap and imported with `docker import`, with the common set of every image
# (docker/common-packages: git, curl, ..., make, gcc, g++, libc6-dev) installed once, in its
# one layer; every language image is built on it with
# BASE_IMAGE=coding-agent-executor-base:latest, its own toolchain from Debian packages.
#
#   scripts/build-images.sh [--rebuild] [--base-only] [--official] [NAME...]
#
#   NAME        python node java go miniforge (default: python node java go)
#   --base-only build (or check) the base image only
#   --rebuild   rebuild even what is cached (the base image too)
#   --official  build on the official bases named in the Dockerfiles (needs a registry);
#               no debootstrap base, and miniforge can be built
#
# Caching: the base image is kept while its recipe (the make_base function below, the
# suite and docker/common-packages) is unchanged; a language image is kept while the hash of its Dockerfile and of the
# base image ID, stored in the image's label org.cae.build-hash, is unchanged. Otherwise
# `docker build` runs with its layer cache. Builds use `--network host` (no bridge needed).
#
# Certificates: when the host trusts CAs of its own (files in /usr/local/share/ca-certificates,
# or regular .pem files beside the symlinks in /etc/ssl/certs, as a TLS-intercepting proxy
# needs), they are passed to the builds as EXTRA_CA_CERTS and trusted in the images, so that
# npm and the agents' package installs work behind the proxy. CAE_EXTRA_CA_FILE names a PEM
# file to use instead; CAE_EXTRA_CA_FILE=none passes nothing.
#
# Environment: CAE_DEBIAN_SUITE (default bookworm), CAE_DEBIAN_MIRROR (default: the mirror
# of the host's apt sources), CAE_BUILD_TMP (where the root filesystem is made).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=coding-agent-executor-base:latest
SUITE=${CAE_DEBIAN_SUITE:-bookworm}
LABEL=org.cae.build-hash
rebuild=0 base_only=0 official=0 names=()
for a in "$@"; do
  case "$a" in
    --rebuild) rebuild=1 ;;
    --base-only) base_only=1 ;;
    --official) official=1 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    python|node|java|go|miniforge) names+=("$a") ;;
    *) echo "build-images: unknown argument '$a' (names: python node java go miniforge)" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -gt 0 ] || names=(python node java go)

say() { echo "build-images: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
label_of() { docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null || true; }

# Removes the image $1 (an ID) when a rebuild has left it without a tag; an image still
# used by a container is kept.
drop_untagged() {
  [ -n "$1" ] || return 0
  [ "$(docker image inspect -f '{{len .RepoTags}}' "$1" 2>/dev/null)" = 0 ] || return 0
  docker image rm "$1" >/dev/null 2>&1 || true
}

# The host's Debian mirror for "$1" (a suite), read from its apt sources (deb822 or one-line).
host_mirror() {
  local suite=$1 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '
      function flush() { if (uri != "" && found && !done) { print uri; done = 1 } uri = ""; found = 0 }
      /^[ \t]*$/ { flush(); next }
      /^URIs:/ { uri = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == s) found = 1 }
      END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v s="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++;
                                     if ($2 ~ /^\[/) i++; if ($(i + 1) == s) print $i }' "$f"
  done
}

# The common set (docker/common-packages), comma-separated for debootstrap --include.
common_packages() {
  sed 's/#.*//' docker/common-packages | tr -s ' \t\n' '\n' | grep . | paste -sd, -
}

# Makes the Debian root filesystem in $1 (debootstrap minbase with the common set) and trims
# it like the official slim images: no docs, man pages or locales, apt lists and caches
# emptied.
make_base() {
  local dir=$1 mirror=$2 security=$3
  debootstrap --variant=minbase --include="$(common_packages)" "$SUITE" "$dir" "$mirror" >&2
  # apt sources of the image: the same mirror, with the updates and security suites.
  rm -f "$dir/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' "$mirror" "$SUITE" "$SUITE"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    if [ -n "$security" ]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: %s-security\nComponents: main\n' "$security" "$SUITE"
      printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
    fi
  } >"$dir/etc/apt/sources.list.d/debian.sources"
  cat >"$dir/etc/dpkg/dpkg.cfg.d/cae-slim" <<'EOF'
# Keep images small: no documentation, manual pages or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
EOF
  cat >"$dir/etc/apt/apt.conf.d/cae-slim" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
EOF
  find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/*
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/* "$dir"/var/log/*.log "$dir"/tmp/*
  # The host's name and resolver must not end up in the image.
  : >"$dir/etc/resolv.conf"
  echo localhost >"$dir/etc/hostname"
}

unmount_under() {
  local dir=$1 m
  # Deepest first; debootstrap mounts proc and sys inside the target while it runs.
  awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r |
    while read -r m; do umount -l "$m" || true; done
}

build_base() {
  local recipe
  recipe=$( { declare -f make_base; echo "$SUITE"; common_packages; } | sha256sum | cut -c1-16)
  if [ $rebuild -eq 0 ] && [ "$(label_of "$BASE")" = "$recipe" ]; then
    say "$BASE is cached"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    say "making the base image needs root (debootstrap)"; return 1
  fi
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
  }
  local mirror security
  mirror=${CAE_DEBIAN_MIRROR:-$(host_mirror "$SUITE" | head -n 1)}
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(host_mirror "$SUITE-security" | head -n 1)
  local t0 tmp; t0=$(now)
  tmp=$(mktemp -d "${CAE_BUILD_TMP:-/var/tmp}/cae-rootfs.XXXXXX")
  # shellcheck disable=SC2064
  trap "unmount_under '$tmp'; rm -rf --one-file-system '$tmp'" EXIT
  say "debootstrap --variant=minbase $SUITE from $mirror"
  make_base "$tmp/root" "$mirror" "$security"
  say "importing $BASE"
  local old; old=$(docker image inspect -f '{{.Id}}' "$BASE" 2>/dev/null || true)
  tar --numeric-owner -C "$tmp/root" -c . | docker import \
    --change "LABEL $LABEL=$recipe" \
    --change 'LABEL org.opencontainers.image.title=coding-agent-executor-base' \
    --change "LABEL org.opencontainers.image.description=\"Debian $SUITE minbase (debootstrap) with the common set of the cae language images\"" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["bash"]' \
    - "$BASE" >/dev/null
  drop_untagged "$old"
  unmount_under "$tmp"
  rm -rf --one-file-system "$tmp"
  trap - EXIT
  say "$BASE built in $(since "$t0") ($(docker image inspect -f '{{.Size}}' "$BASE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}

# The host's own CA certificates (PEM text), see the header.
extra_ca_certs() {
  local f
  case "${CAE_EXTRA_CA_FILE:-}" in
    none) return 0 ;;
    ?*) cat "$CAE_EXTRA_CA_FILE"; return 0 ;;
  esac
  for f in /usr/local/share/ca-certificates/*.crt /usr/local/share/ca-certificates/*/*.crt \
           /etc/ssl/certs/*.pem; do
    if [ -f "$f" ] && [ ! -L "$f" ]; then cat "$f"; fi
  done | awk '/-----BEGIN CERTIFICATE-----/ { pem = "" ; on = 1 }
              on { pem = pem $0 "\n" }
              /-----END CERTIFICATE-----/ { on = 0; if (!seen[pem]++) printf "%s", pem }'
}

build_one() {
  local name=$1 df=docker/Dockerfile-executor-$1 img=coding-agent-executor-$1:latest
  local args=() basekey=official
  if [ $official -eq 0 ]; then
    if [ "$name" = miniforge ]; then
      say "skipping miniforge: it needs conda's installer, which comes with its official base" \
          "image condaforge/miniforge3 (not reachable without a registry). On a machine with a" \
          "registry: scripts/build-images.sh --official miniforge, or" \
          "docker compose -f docker/docker-compose.yml --profile executor-build build executor-miniforge"
      return 0
    fi
    args=(--build-arg "BASE_IMAGE=$BASE")
    basekey=$(docker image inspect -f '{{.Id}}' "$BASE")
  fi
  local ca; ca=$(extra_ca_certs)
  [ -z "$ca" ] || args+=(--build-arg "EXTRA_CA_CERTS=$ca")
  local hash
  hash=$( { cat "$df" docker/common-packages; echo "$basekey"; echo "$ca"; } | sha256sum | cut -c1-16)
  if [ $rebuild -eq 0 ] && [ "$(label_of "$img")" = "$hash" ]; then
    say "$img is cached"
    return 0
  fi
  local t0 old; t0=$(now)
  old=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null || true)
  say "building $img"
  docker build --network host --force-rm "${args[@]}" --label "$LABEL=$hash" \
    -f "$df" -t "$img" docker/ >&2
  drop_untagged "$old"
  say "$img built in $(since "$t0") ($(docker image inspect -f '{{.Size}}' "$img" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}

if [ $official -eq 0 ]; then
  build_base
fi
[ $base_only -eq 1 ] && exit 0
for n in "${names[@]}"; do
  build_one "$n"
done
