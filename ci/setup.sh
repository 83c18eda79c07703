#!/usr/bin/env bash
# Installs what locksuite's harness needs to start its own servers on a
# Debian or Ubuntu machine, and nothing it already has. Idempotent; safe to
# copy into a lock library's CI.
#   - redis-server (apt), for the Redis backend
#   - redis-sentinel (apt), for the redis-sentinel cluster (primary, replica,
#     three Sentinels) of the failover scenarios
#   - PostgreSQL's server (apt postgresql-15), for the Postgres backend and the
#     counter store; the harness makes a throwaway cluster with initdb
#   - MariaDB's server (apt mariadb-server, 10.11 on Debian 12), for the mysql
#     backend (GET_LOCK); the harness makes a throwaway server with
#     mariadb-install-db
#   - libfaketime (apt faketime), so that the clock-jump scenario can move
#     the harness's redis-server's wall clock mid-run
#   - chromium (apt), for the test that opens the HTML timelines headless
#   - docker-compose (apt), only to validate docker-compose.yml (no engine)
#   - ZooKeeper 3.8 (apt zookeeper, with Java 17), for the zookeeper and
#     zk-lock backends and the zookeeper-ensemble; the harness runs the
#     server's jar with java itself (no service is started)
#   - Consul 1.13.9, built from source with `go build` from the tools module in
#     harness/consulbuild (about 7 minutes the first time) and cached at
#     ${XDG_CACHE_HOME:-~/.cache}/locksuite/consul-1.13.9
#   - kube-apiserver 1.37.2, built from source with `go build` from the tools
#     module in harness/kubebuild (about 5 minutes on an idle 2-core machine,
#     20 on a busy one, the first time; a 171 MB binary) and cached at
#     ${XDG_CACHE_HOME:-~/.cache}/locksuite/kube-apiserver-1.37.2, for the
#     k8s-lease and leader-election backends. With LOCKSUITE_KUBE_APISERVER
#     naming a kube-apiserver binary it builds nothing.
#   - kubelet, kube-controller-manager and kube-scheduler 1.37.2, built in the
#     same go build as kube-apiserver and cached beside it (each named by
#     LOCKSUITE_KUBELET, LOCKSUITE_KUBE_CONTROLLER_MANAGER,
#     LOCKSUITE_KUBE_SCHEDULER instead), and containerd, runc and
#     containernetworking-plugins (apt), for the single-node Kubernetes
#     cluster the harness starts (servers.StartKubeCluster)
# etcd and NATS need nothing: the harness embeds the real servers.
#
# From another repository (a lock library's CI, see ci/README.md), run it by
# its path in a checkout of locksuite (.locksuite/ci/setup.sh), or copy it
# alone: it then finds locksuite's source for the Consul build in
# $LOCKSUITE_SRC, else as the module github.com/locksuite/locksuite of the
# Go module in the current directory (`go list -m`, which follows a replace
# to a checkout). With LOCKSUITE_CONSUL naming a consul binary it builds
# nothing.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# build_dir prints the directory of the tools module harness/$1, to build $2
# in; $3 is how to do without it (a variable that names a built binary).
build_dir() {
  local d
  for d in "${LOCKSUITE_SRC:-}" "$root" "$(go list -m -f '{{.Dir}}' github.com/locksuite/locksuite 2>/dev/null || true)"; do
    if [ -n "$d" ] && [ -f "$d/harness/$1/go.mod" ]; then echo "$d/harness/$1"; return 0; fi
  done
  echo "ci/setup.sh: cannot find locksuite's harness/$1 to build $2: check out locksuite and set LOCKSUITE_SRC to it, or set $3" >&2
  return 1
}

# build_once BIN NAME VERSION MINUTES MODULE FIX PACKAGE [FLAGS...] builds
# PACKAGE (go build FLAGS) in the tools module harness/MODULE into BIN,
# unless BIN is already there (about MINUTES minutes, once); FIX is how to
# do without the build (see build_dir).
build_once() {
  local bin=$1 name=$2 version=$3 minutes=$4 module=$5 fix=$6 pkg=$7 start dir
  shift 7
  if [ -x "$bin" ]; then
    echo "ci/setup.sh: $name $version cached at $bin"
    return 0
  fi
  echo "ci/setup.sh: building $name $version from source (about $minutes minutes, once) into $bin"
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  dir=$(build_dir "$module" "$name" "$fix")
  (cd "$dir" && go build -trimpath "$@" -o "$bin.tmp" "$pkg")
  mv "$bin.tmp" "$bin"
  echo "ci/setup.sh: $name built in $((SECONDS - start))s"
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "ci/setup.sh: need root to run: $*" >&2; return 1; fi
}

apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

have_pg() { command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }

if ! command -v redis-server >/dev/null; then
  echo "ci/setup.sh: installing redis-server"
  apt_install redis-server
  # Debian's package may start a system instance; the harness starts its own.
  as_root service redis-server stop >/dev/null 2>&1 || true
fi
if ! command -v redis-sentinel >/dev/null; then
  echo "ci/setup.sh: installing redis-sentinel"
  apt_install redis-sentinel
  # Its package starts a system sentinel; the harness starts its own.
  as_root service redis-sentinel stop >/dev/null 2>&1 || true
fi
if ! have_pg; then
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  # PostgreSQL 15 where the distribution has it (Debian 12), else its own.
  pg=postgresql-15
  apt-cache show "$pg" >/dev/null 2>&1 || pg=postgresql
  echo "ci/setup.sh: installing $pg"
  apt_install "$pg"
  as_root service postgresql stop >/dev/null 2>&1 || true
fi
have_mariadb() { command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]; }
if ! have_mariadb; then
  echo "ci/setup.sh: installing mariadb-server"
  apt_install mariadb-server
  # Its package may start a system server; the harness starts its own.
  as_root service mariadb stop >/dev/null 2>&1 || true
fi
have_faketime() { ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || ls /usr/lib/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; }
if ! have_faketime; then
  echo "ci/setup.sh: installing faketime (libfaketime)"
  apt_install faketime
fi

# A compose client (no engine: there is none in CI) validates
# docker-compose.yml (TestDockerCompose runs `docker-compose config`).
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1; then
  echo "ci/setup.sh: installing docker-compose (to validate docker-compose.yml)"
  apt_install docker-compose
fi

if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  echo "ci/setup.sh: installing chromium"
  apt_install chromium
fi

if [ ! -f /usr/share/java/zookeeper.jar ] || ! command -v java >/dev/null; then
  echo "ci/setup.sh: installing zookeeper"
  # Recommends would pull in the zookeeperd service; the harness needs none.
  apt_install zookeeper
fi

consul_bin="${XDG_CACHE_HOME:-$HOME/.cache}/locksuite/consul-1.13.9"
if [ -n "${LOCKSUITE_CONSUL:-}" ]; then
  echo "ci/setup.sh: using LOCKSUITE_CONSUL=$LOCKSUITE_CONSUL"
else
  build_once "$consul_bin" consul 1.13.9 7 consulbuild "LOCKSUITE_CONSUL to a consul 1.13.x binary" github.com/hashicorp/consul
fi
"$consul_bin" version | head -1 2>/dev/null || true

# build_kube NAME... builds the Kubernetes components NAME (kube-apiserver,
# kubelet, kube-controller-manager, kube-scheduler) of the version the
# tools module harness/kubebuild pins, the missing ones in ONE go build so
# that they share its compile, and caches each at
# ${XDG_CACHE_HOME:-~/.cache}/locksuite/NAME-1.37.2. A component whose
# variable names a binary (LOCKSUITE_KUBE_APISERVER, LOCKSUITE_KUBELET,
# LOCKSUITE_KUBE_CONTROLLER_MANAGER, LOCKSUITE_KUBE_SCHEDULER) is not built.
build_kube() {
  local version=1.37.2 cache="${XDG_CACHE_HOME:-$HOME/.cache}/locksuite" name var pkgs=() names=() dir out start
  local v=k8s.io/component-base/version
  for name in "$@"; do
    var=LOCKSUITE_$(echo "$name" | tr 'a-z-' 'A-Z_')
    if [ -n "${!var:-}" ]; then
      echo "ci/setup.sh: using $var=${!var}"
    elif [ -x "$cache/$name-$version" ]; then
      echo "ci/setup.sh: $name $version cached at $cache/$name-$version"
    else
      names+=("$name"); pkgs+=("k8s.io/kubernetes/cmd/$name")
    fi
  done
  [ ${#names[@]} -gt 0 ] || return 0
  echo "ci/setup.sh: building ${names[*]} $version from source in one go build (kube-apiserver alone: about 5 minutes on an idle 2-core machine, 20 on a busy one; each further component adds a few) into $cache"
  dir=$(build_dir kubebuild "${names[*]}" "LOCKSUITE_KUBE_APISERVER (and LOCKSUITE_KUBELET, ...) to binaries of Kubernetes 1.37.x")
  mkdir -p "$cache"
  out=$(mktemp -d "$cache/.kube-build.XXXXXX")
  start=$SECONDS
  # The version variables make /version and each binary's --version say
  # v1.37.2, as a release build does (hack/lib/version.sh sets them).
  if ! (cd "$dir" && go build -trimpath -o "$out/" \
      -ldflags "-X $v.gitVersion=v$version -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean" "${pkgs[@]}"); then
    rm -rf "$out"; return 1
  fi
  for name in "${names[@]}"; do mv "$out/$name" "$cache/$name-$version"; done
  rm -rf "$out"
  echo "ci/setup.sh: ${names[*]} built in $((SECONDS - start))s"
}

# install_kube_node installs what the node of the Kubernetes cluster
# (servers.StartKubeCluster) runs besides kubelet: Debian's containerd 1.6
# (with ctr and the runc shim), runc, and the CNI plugins
# (containernetworking-plugins: bridge, host-local, loopback). The harness
# runs a containerd of its own; a system one the package may start is
# stopped.
install_kube_node() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "ci/setup.sh: installing ${missing[*]} (the node of the Kubernetes cluster)"
  apt_install "${missing[@]}"
  as_root service containerd stop >/dev/null 2>&1 || true
}

# The Kubernetes cluster (kube-apiserver alone is what the k8s-lease and
# leader-election backends need).
install_kube_node
build_kube kube-apiserver kubelet kube-controller-manager kube-scheduler
kube_bin=${LOCKSUITE_KUBE_APISERVER:-${XDG_CACHE_HOME:-$HOME/.cache}/locksuite/kube-apiserver-1.37.2}
"$kube_bin" --version 2>/dev/null || true
