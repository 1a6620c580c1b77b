#!/usr/bin/env bash
# A Debian 13 (trixie: Slurm 24.11, MariaDB 11.8, munge 0.5.16) chroot for running slurmadm and
# its test suite on the other supported Slurm release from a Debian 12 machine. Run as root.
#
#   scripts/trixie-chroot.sh create          debootstrap trixie (minbase) and mount; idempotent
#   scripts/trixie-chroot.sh run CMD [ARG..] run CMD inside, in /src (this checkout), e.g.
#       scripts/trixie-chroot.sh run scripts/setup.sh test
#       scripts/trixie-chroot.sh run env SLURMADM_TEST_PORT_BASE=24500 .venv/bin/python -m pytest -m integration
#   scripts/trixie-chroot.sh enter           an interactive shell inside, in /src
#   scripts/trixie-chroot.sh status          what exists, what is mounted, what runs inside
#   scripts/trixie-chroot.sh umount          unmount (refuses while processes run inside)
#   scripts/trixie-chroot.sh mount           mount again (run/enter do it themselves)
#   scripts/trixie-chroot.sh destroy         unmount, then delete the chroot
#   scripts/trixie-chroot.sh mirror          the Debian mirror `create` would use, and where from
#
# Inside, the checkout is bind-mounted at /src. Its .venv and build/ are the chroot's own (each
# bind-mounted from the chroot over the checkout's, which stay untouched): the chroot's Python
# (3.13) and C library differ from the host's. /proc, /sys, /dev, /dev/pts, a tmpfs /run and
# /dev/shm are mounted; no cgroup filesystem (as in a container). Network and hostname are the
# host's, so daemons started inside need their own ports (e.g. `--port-base`), as on the host;
# /etc/hosts, /etc/resolv.conf and the host's CA bundle (for pip: PIP_CERT, SSL_CERT_FILE) are
# copied in.
# Processes started inside (a dev cluster) keep running after `run` returns; stop them inside
# (`slurmadm dev-cluster down`) before `umount`/`destroy`.
#
# The Debian mirror is the host's own: the first `deb` source of a Debian release suite (not
# -security, -updates or -backports) in /etc/apt/sources.list, then sources.list.d/*.list and
# *.sources (deb822), as apt reads them; TRIXIE_MIRROR overrides it.
#
# Other Debian suites the same way: TRIXIE_SUITE=forky (Debian testing: Slurm 26.05) or sid, each
# in its own root (/srv/<suite> unless TRIXIE_ROOT says). A debootstrap too old to know the suite
# (bookworm's has no forky script) builds it with its sid script, which serves every suite after
# it; testing and unstable Release files are short-lived (a mirror's copy can be past its
# Valid-Until), so apt inside those chroots does not check Valid-Until (debootstrap never did).
#   TRIXIE_SUITE=forky scripts/trixie-chroot.sh create
#   scripts/trixie-chroot.sh debootstrap     what `create` would run (no root needed)
#
# Environment: TRIXIE_SUITE (default trixie), TRIXIE_ROOT (default /srv/<suite>), TRIXIE_MIRROR
# (default: from the host's apt sources), TRIXIE_SRC (the checkout to mount at /src; default this
# one), TRIXIE_APT_ETC (where the apt sources are read; default /etc/apt), TRIXIE_DEBOOTSTRAP_SCRIPTS
# (debootstrap's suite scripts; default /usr/share/debootstrap/scripts).
set -euo pipefail

SUITE=${TRIXIE_SUITE:-trixie}
case "$SUITE" in ""|*[!a-z]*) echo "trixie-chroot: TRIXIE_SUITE=$SUITE is not a Debian suite name" >&2; exit 2;; esac
ROOT=${TRIXIE_ROOT:-/srv/$SUITE}
SCRIPTS=${TRIXIE_DEBOOTSTRAP_SCRIPTS:-/usr/share/debootstrap/scripts}
# suites whose Release files expire within days (testing, unstable)
case "$SUITE" in trixie|bookworm|bullseye|stable|oldstable) SHORT_LIVED=no ;; *) SHORT_LIVED=yes ;; esac
APT_ETC=${TRIXIE_APT_ETC:-/etc/apt}
SRC=$(cd "${TRIXIE_SRC:-$(dirname "$0")/..}" && pwd)
OWN_DIRS=(.venv .venv-gcm build)  # per-release build outputs inside the checkout
DONE="$ROOT/.slurmadm-chroot-complete"
HOST_CA=/etc/ssl/certs/ca-certificates.crt
HOST_CA_INSIDE=/etc/ssl/host-ca-certificates.crt

die() { echo "trixie-chroot: $*" >&2; exit 2; }
say() { echo "trixie-chroot: $*" >&2; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# "<uri> <file>" of the host's first Debian release source, or nothing
host_mirror() {
  local files=() f
  [ -r "$APT_ETC/sources.list" ] && files+=("$APT_ETC/sources.list")
  for f in "$APT_ETC"/sources.list.d/*.list "$APT_ETC"/sources.list.d/*.sources; do
    [ -r "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 0
  awk '
    function release(suite) { return suite !~ /-(security|updates|backports|proposed-updates)$/ && suite !~ /\// }
    function plain(uri) { return uri ~ /^(https?|ftp|file):\/\// }
    function flush() {  # end of a deb822 stanza
      if (is822 && types ~ /(^|[ \t])deb([ \t]|$)/ && enabled !~ /^[Nn]o$/) {
        n = split(suites, s, /[ \t]+/); m = split(uris, u, /[ \t]+/)
        for (i = 1; i <= n; i++) if (s[i] != "" && release(s[i]))
          for (j = 1; j <= m; j++) if (plain(u[j])) { print u[j], FILENAME; found = 1; exit }
      }
      types = uris = suites = enabled = ""
    }
    FNR == 1 { flush(); is822 = (FILENAME ~ /\.sources$/) }
    is822 {
      if ($0 ~ /^[ \t]*$/) { flush(); next }
      if ($0 ~ /^#/) next
      key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
      if (key == "types") types = val; else if (key == "uris") uris = val
      else if (key == "suites") suites = val; else if (key == "enabled") enabled = val
      next
    }
    {
      sub(/#.*/, "")
      if ($1 != "deb") next
      i = 2
      if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if (plain($i) && release($(i + 1))) { print $i, FILENAME; found = 1; exit }
    }
    END { if (!found) flush() }
  ' "${files[@]}"
}

mirror() {  # the mirror to debootstrap from: TRIXIE_MIRROR, else the host's
  if [ -n "${TRIXIE_MIRROR:-}" ]; then
    echo "$TRIXIE_MIRROR TRIXIE_MIRROR"
    return
  fi
  local found
  found=$(host_mirror)
  [ -n "$found" ] || die "no Debian release source (deb <uri> <suite>) in $APT_ETC/sources.list or $APT_ETC/sources.list.d/; set TRIXIE_MIRROR"
  echo "$found"
}

# debootstrap's arguments after its options: SUITE TARGET MIRROR [SCRIPT]; the sid script when
# this debootstrap has none for the suite
debootstrap_args() {
  local found
  found=$(mirror)
  printf '%s\n' "$SUITE" "$ROOT" "${found%% *}"
  [ -d "$SCRIPTS" ] || die "no debootstrap suite scripts in $SCRIPTS (apt-get install debootstrap)"
  if [ ! -e "$SCRIPTS/$SUITE" ]; then
    [ -e "$SCRIPTS/sid" ] || die "debootstrap knows neither $SUITE nor sid ($SCRIPTS); install a newer debootstrap"
    printf '%s\n' "$SCRIPTS/sid"
  fi
}

if [ "${1:-}" = mirror ]; then
  mirror
  exit 0
fi
if [ "${1:-}" = debootstrap ]; then
  args=$(debootstrap_args)
  echo "debootstrap --variant=minbase $(echo "$args" | tr '\n' ' ' | sed 's/ $//')"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, mount and chroot need it)"
case "$ROOT" in /|"") die "TRIXIE_ROOT=$ROOT: refusing";; esac

# mount points in the order they are mounted (unmounted in reverse)
mount_points() {
  printf '%s\n' "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" "$ROOT/dev/pts" "$ROOT/dev/shm" "$ROOT/run" "$ROOT/src"
  local d
  for d in "${OWN_DIRS[@]}"; do printf '%s\n' "$ROOT/src/$d"; done
}

mounted_under_root() {  # every mount at or below $ROOT, deepest first
  awk -v r="$ROOT" '$5 == r || index($5, r "/") == 1 {print $5}' /proc/self/mountinfo | sort -r
}

inside_pids() {  # processes whose root directory is the chroot
  local p
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && echo "${p#/proc/}"
  done
  return 0
}

create() {
  if [ -e "$DONE" ]; then
    say "$ROOT: already created"
  else
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
    local found args=()
    found=$(mirror)
    mapfile -t args < <(debootstrap_args)
    say "debootstrap $SUITE into $ROOT from ${args[2]} (from ${found#* }${args[3]:+; with ${args[3]}}; a few minutes)"
    mkdir -p "$ROOT"
    # A half-made chroot from an interrupted run: debootstrap starts over in place.
    debootstrap --variant=minbase "${args[@]}"
    if [ "$SHORT_LIVED" = yes ]; then
      printf '%s\n' "// $SUITE's Release files expire within days; a mirror's copy may be past Valid-Until" \
        'Acquire::Check-Valid-Until "false";' > "$ROOT/etc/apt/apt.conf.d/99slurmadm-valid-until"
    fi
    touch "$DONE"
  fi
  do_mount
}

do_mount() {
  [ -e "$DONE" ] || die "$ROOT: not created yet (run: $0 create)"
  # the chroot's / a mount point of its own: `unshare --propagation private` inside (the dev
  # cluster's sshd per fake node) changes the propagation of /, which needs / to be a mount
  if ! mountpoint -q "$ROOT"; then
    [ -z "$(mounted_under_root)" ] || die "mounted under $ROOT before $ROOT itself: run '$0 umount' first"
    mount --bind "$ROOT" "$ROOT"
  fi
  mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
  mountpoint -q "$ROOT/sys" || mount -t sysfs sysfs "$ROOT/sys"
  mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
  mountpoint -q "$ROOT/dev/pts" || mount --bind /dev/pts "$ROOT/dev/pts"
  mountpoint -q "$ROOT/dev/shm" || mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOT/dev/shm"
  if ! mountpoint -q "$ROOT/run"; then
    mount -t tmpfs -o mode=755,nosuid,nodev run "$ROOT/run"
    mkdir -p "$ROOT/run/lock"
  fi
  mkdir -p "$ROOT/src"
  if mountpoint -q "$ROOT/src" && [ "$(stat -c %d:%i "$ROOT/src")" != "$(stat -c %d:%i "$SRC")" ]; then
    die "$ROOT/src is another checkout; run '$0 umount' there first, or set TRIXIE_ROOT"
  fi
  if ! mountpoint -q "$ROOT/src"; then
    mount --bind "$SRC" "$ROOT/src"
    mount --make-private "$ROOT/src"   # our mounts over .venv/build stay inside the chroot
  fi
  local d
  for d in "${OWN_DIRS[@]}"; do
    mkdir -p "$ROOT/var/lib/slurmadm-src/$d" "$SRC/$d"
    mountpoint -q "$ROOT/src/$d" || mount --bind "$ROOT/var/lib/slurmadm-src/$d" "$ROOT/src/$d"
  done
  # name resolution as on the host (the dev cluster resolves this host's name)
  cp /etc/hosts "$ROOT/etc/hosts"
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
  # TLS as on the host (which may trust a proxy's CA); package installs inside rewrite the
  # chroot's own bundle, so this is a separate file
  if [ -e "$HOST_CA" ]; then
    mkdir -p "$(dirname "$ROOT$HOST_CA_INSIDE")"
    cp -L "$HOST_CA" "$ROOT$HOST_CA_INSIDE"
  fi
}

do_umount() {
  local pids
  pids=$(inside_pids | tr '\n' ' ')
  [ -z "$pids" ] || die "processes still run inside $ROOT (pids: $pids); stop them first (e.g. $0 run .venv/bin/slurmadm dev-cluster down --state-dir ...)"
  local m
  for m in $(mounted_under_root); do
    umount "$m" || umount -l "$m"
  done
  [ -z "$(mounted_under_root)" ] || die "still mounted under $ROOT: $(mounted_under_root | tr '\n' ' ')"
}

in_chroot() {
  do_mount
  local tls=()
  [ ! -e "$ROOT$HOST_CA_INSIDE" ] || tls=(PIP_CERT="$HOST_CA_INSIDE" SSL_CERT_FILE="$HOST_CA_INSIDE")
  chroot "$ROOT" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${tls[@]}" \
    /bin/bash -c 'cd /src && exec "$@"' bash "$@"
}

status() {
  if [ -e "$DONE" ]; then
    echo "chroot: $ROOT ($SUITE, Debian $(cat "$ROOT/etc/debian_version"))"
  else
    echo "chroot: $ROOT not created"
  fi
  echo "mounted: $(mounted_under_root | sort | tr '\n' ' ')"
  echo "processes inside: $(inside_pids | tr '\n' ' ')"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  create) create ;;
  mount) do_mount ;;
  umount) do_umount ;;
  run) [ $# -gt 0 ] || die "run: give a command"; in_chroot "$@" ;;
  enter) in_chroot /bin/bash -i ;;
  status) status ;;
  destroy)
    do_umount
    say "deleting $ROOT"
    rm -rf --one-file-system "$ROOT"
    ;;
  -h|--help|help) usage ;;
  *) usage >&2; exit 2 ;;
esac
