#!/usr/bin/env bash
# Installs what locksuite's harness needs to start its own servers on a
# Debian or Ubuntu machine, and nothing it already has. Idempotent; safe to
# copy into a lock library's CI.
#
#   ci/setup.sh [--list | --dry-run] [SERVICE...]
#
# SERVICE is a service of suite/local's table (local.Services(); the
# TestSetupServices test checks that the names agree), a lock library of
# another language (local.Languages, or "languages" for all), or "tests" for what
# locksuite's own tests need besides the servers. With none, it installs
# everything (all services and "tests"). A lock library's CI names the
# services it runs: `ci/setup.sh redis` installs redis-server and
# libfaketime, nothing else. --list prints what it would install on a
# machine that has none of it ("apt PACKAGE" and "build BINARY" lines) and
# installs nothing; --dry-run prints what it would install here.
#
# What each service needs (plan below):
#   redis           redis-server (apt), and libfaketime (apt faketime), so
#                   that the clock-jump scenario can move the harness's
#                   redis-server's wall clock mid-run
#   redis-3         redis-server (three of them, for redsync-3)
#   redis-sentinel  redis-server and redis-sentinel (apt): a primary, a
#                   replica and three Sentinels, for the failover scenarios
#   postgres        PostgreSQL's server (apt postgresql-15, or postgresql
#                   where the distribution has no 15); the harness makes a
#                   throwaway cluster with initdb. The counter store too.
#   pgbouncer, pgbouncer-one, pgbouncer-session
#                   PgBouncer (apt pgbouncer, 1.18 on Debian 12) and
#                   PostgreSQL's server: the harness starts a pgbouncer in
#                   transaction pooling (pgbouncer-one: with one server
#                   connection), or session pooling, in front of a
#                   throwaway Postgres of its own
#   mysql           MariaDB's server (apt mariadb-server, 10.11 on Debian
#                   12), for GET_LOCK; the harness makes a throwaway server
#                   with mariadb-install-db
#   memcached       memcached 1.6 (apt memcached, 1.6.18 on Debian 12), for
#                   the meta protocol's add and compare-and-delete; the
#                   harness runs it itself (the package's service is
#                   stopped)
#   zookeeper, zookeeper-ensemble
#                   ZooKeeper 3.8 (apt zookeeper, with Java 17); the harness
#                   runs the server's jar with java itself (no service is
#                   started)
#   consul, consul-cluster
#                   Consul 1.13.9, built from source with `go build` from
#                   the tools module in harness/consulbuild (about 7 minutes
#                   the first time) and cached at
#                   ${XDG_CACHE_HOME:-~/.cache}/locksuite/consul-1.13.9.
#                   With LOCKSUITE_CONSUL naming a consul binary it builds
#                   nothing.
#   kube            kube-apiserver 1.37.2, built from source with `go build`
#                   from the tools module in harness/kubebuild (about 5
#                   minutes on an idle 2-core machine, 20 on a busy one, the
#                   first time; a 171 MB binary) and cached at
#                   ${XDG_CACHE_HOME:-~/.cache}/locksuite/kube-apiserver-1.37.2,
#                   for the k8s-lease and leader-election backends. With
#                   LOCKSUITE_KUBE_APISERVER naming a kube-apiserver binary
#                   it builds nothing.
#   etcd, etcd-cluster, nats, nats-cluster
#                   nothing: the harness embeds the real servers
#   kube-cluster    a Kubernetes cluster of the harness's own
#                   (kubecluster.Start): kubelet,
#                   kube-controller-manager and kube-scheduler 1.37.2 built in
#                   the same go build as kube-apiserver and cached beside it
#                   (each named by LOCKSUITE_KUBELET,
#                   LOCKSUITE_KUBE_CONTROLLER_MANAGER, LOCKSUITE_KUBE_SCHEDULER
#                   instead), and Debian's containerd, runc,
#                   containernetworking-plugins and iptables for its nodes
#   redis-aof, redis-aof-always
#                   redis-server (apt), with an append-only file, for the
#                   crash scenarios
#   nats-kv-sync    nothing: the embedded nats-server, syncing every write
#   redis-py, kazoo, redlock-js, redis-semaphore, curator, languages
#                   the lock libraries of other languages (suite/local's
#                   Languages; "languages" is all of them), each with its
#                   service's server: redis-py Debian's python3-redis and
#                   kazoo python3-kazoo, both for /usr/bin/python3 (apt);
#                   redlock-js and redis-semaphore Node and npm (apt nodejs
#                   npm where node is missing: Node 20 from nodesource or
#                   Debian's 18), the npm packages themselves installed by
#                   the suite with `npm ci` from the committed
#                   package-lock.json the first time a worker starts, into
#                   ${XDG_CACHE_HOME:-~/.cache}/locksuite/workers; curator
#                   Debian's Curator jars (apt libcurator-recipes-java) and
#                   a JDK 17 (apt openjdk-17-jdk-headless) for javac
#   tests           chromium (apt), for the test that opens the HTML
#                   timelines headless, and docker-compose (apt), only to
#                   validate docker-compose.yml (no engine)
#
# The builds start first, in the background, while apt installs the
# packages (one apt-get install for all of them). Consul and kube-apiserver
# are separate tools modules with dependency versions of their own, so they
# cannot share one `go build`; the two builds run at once.
#
# From another repository (a lock library's CI, see ci/README.md), run it by
# its path in a checkout of locksuite (.locksuite/ci/setup.sh), or copy it
# alone: it then finds locksuite's source for the builds in $LOCKSUITE_SRC,
# else as the module github.com/locksuite/locksuite of the Go module in the
# current directory (`go list -m`, which follows a replace to a checkout).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# services is every name plan knows, in suite/local's table order, then
# tests.
services="consul etcd postgres redis zookeeper mysql nats memcached kube redis-3 consul-cluster etcd-cluster redis-sentinel zookeeper-ensemble nats-cluster redis-aof redis-aof-always nats-kv-sync pgbouncer-one pgbouncer pgbouncer-session kube-cluster redis-py kazoo redlock-js redis-semaphore curator languages tests"

# plan SERVICE prints what SERVICE needs, one "apt PACKAGE" or "build
# BINARY" line each; it fails for an unknown SERVICE. A new service adds
# its line here.
plan() {
  case $1 in
    redis) echo "apt redis-server"; echo "apt faketime" ;;
    redis-3 | redis-aof | redis-aof-always) echo "apt redis-server" ;;
    redis-sentinel) echo "apt redis-server"; echo "apt redis-sentinel" ;;
    postgres) echo "apt postgresql-15" ;;
    pgbouncer | pgbouncer-one | pgbouncer-session) echo "apt postgresql-15"; echo "apt pgbouncer" ;;
    mysql) echo "apt mariadb-server" ;;
    memcached) echo "apt memcached" ;;
    zookeeper | zookeeper-ensemble) echo "apt zookeeper" ;;
    consul | consul-cluster) echo "build consul" ;;
    kube) echo "build kube-apiserver" ;;
    kube-cluster)
      echo "apt containerd"; echo "apt runc"; echo "apt containernetworking-plugins"; echo "apt iptables"
      for c in $kube_components; do echo "build $c"; done ;;
    etcd | etcd-cluster | nats | nats-cluster | nats-kv-sync) ;; # embedded
    redis-py) echo "apt redis-server"; echo "apt python3-redis" ;;
    kazoo) echo "apt zookeeper"; echo "apt python3-kazoo" ;;
    redlock-js | redis-semaphore) echo "apt redis-server"; echo "apt nodejs"; echo "apt npm" ;;
    curator) echo "apt zookeeper"; echo "apt openjdk-17-jdk-headless"; echo "apt libcurator-recipes-java" ;;
    languages) for l in redis-py kazoo redlock-js redis-semaphore curator; do plan "$l"; done ;;
    tests) echo "apt chromium"; echo "apt docker-compose" ;;
    *) return 1 ;;
  esac
}

have_pg() { command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }
have_mariadb() { command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]; }
have_faketime() { ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || ls /usr/lib/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; }

# have PACKAGE reports whether what PACKAGE gives the harness is here.
have() {
  case $1 in
    redis-server | redis-sentinel) command -v "$1" >/dev/null ;;
    pgbouncer) command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] ;;
    postgresql-15) have_pg ;;
    mariadb-server) have_mariadb ;;
    memcached) command -v memcached >/dev/null || [ -x /usr/bin/memcached ] ;;
    faketime) have_faketime ;;
    zookeeper) [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null ;;
    chromium) command -v chromium >/dev/null || command -v chromium-browser >/dev/null ;;
    docker-compose) command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 ;;
    containerd | runc | iptables) command -v "$1" >/dev/null ;;
    containernetworking-plugins) [ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] ;;
    python3-redis) /usr/bin/python3 -c 'import redis' 2>/dev/null ;;
    python3-kazoo) /usr/bin/python3 -c 'import kazoo' 2>/dev/null ;;
    nodejs) command -v node >/dev/null ;;
    npm) command -v npm >/dev/null ;;
    openjdk-17-jdk-headless) command -v javac >/dev/null ;;
    libcurator-recipes-java) [ -f /usr/share/java/curator-recipes.jar ] ;;
    *) return 1 ;;
  esac
}

consul_bin="${XDG_CACHE_HOME:-$HOME/.cache}/locksuite/consul-1.13.9"
if [ -n "${LOCKSUITE_CONSUL:-}" ]; then consul_bin=$LOCKSUITE_CONSUL; fi
kube_version=1.37.2
kube_components="kube-apiserver kubelet kube-controller-manager kube-scheduler"
kube_cache="${XDG_CACHE_HOME:-$HOME/.cache}/locksuite"
# kube_var NAME is the variable that names a built Kubernetes component
# instead of its build: LOCKSUITE_KUBE_APISERVER, LOCKSUITE_KUBELET, ...
kube_var() { echo "LOCKSUITE_$(echo "$1" | tr 'a-z-' 'A-Z_')"; }

# built BINARY reports whether the build of BINARY is not needed: cached,
# or named by its variable.
built() {
  case $1 in
    consul) [ -n "${LOCKSUITE_CONSUL:-}" ] || [ -x "$consul_bin" ] ;;
    kube-apiserver | kubelet | kube-controller-manager | kube-scheduler)
      local var
      var=$(kube_var "$1")
      [ -n "${!var:-}" ] || [ -x "$kube_cache/$1-$kube_version" ] ;;
  esac
}

usage() {
  echo "usage: ci/setup.sh [--list | --dry-run] [SERVICE...]"
  echo "services: $services"
}

mode=install
names=()
for a in "$@"; do
  case $a in
    --list) mode=list ;;
    --dry-run) mode=dry-run ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "ci/setup.sh: unknown flag $a" >&2; usage >&2; exit 2 ;;
    *) names+=("$a") ;;
  esac
done
if [ ${#names[@]} -eq 0 ]; then read -r -a names <<<"$services"; fi

# items: what the named services need, each once, in order.
items=()
for n in "${names[@]}"; do
  if ! out=$(plan "$n"); then
    echo "ci/setup.sh: unknown service \"$n\": choose from $services" >&2
    exit 2
  fi
  while IFS= read -r item; do
    if [ -n "$item" ] && [[ " ${items[*]} " != *" $item "* ]]; then items+=("$item"); fi
  done <<<"$out"
done

if [ "$mode" = list ]; then
  for item in "${items[@]}"; do echo "$item"; done
  exit 0
fi

# todo: the items this machine lacks.
todo=()
for item in "${items[@]}"; do
  read -r how what <<<"$item"
  if [ "$how" = apt ] && ! have "$what"; then todo+=("$item"); fi
  if [ "$how" = build ] && ! built "$what"; then todo+=("$item"); fi
done
if [ "$mode" = dry-run ]; then
  for item in "${todo[@]}"; do echo "$item"; done
  exit 0
fi

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

# build BIN NAME VERSION MODULE FIX PACKAGE [FLAGS...] builds PACKAGE (go
# build FLAGS) in the tools module harness/MODULE into BIN; FIX is how to do
# without the build (see build_dir).
build() {
  local bin=$1 name=$2 version=$3 module=$4 fix=$5 pkg=$6 start dir
  shift 6
  mkdir -p "$(dirname "$bin")"
  start=$SECONDS
  dir=$(build_dir "$module" "$name" "$fix")
  (cd "$dir" && go build -trimpath "$@" -o "$bin.tmp" "$pkg")
  mv "$bin.tmp" "$bin"
  echo "ci/setup.sh: $name $version built in $((SECONDS - start))s into $bin"
}

# build_kube NAME... builds the Kubernetes components NAME of the version the
# tools module harness/kubebuild pins in ONE go build, so that they share
# its compile, and caches each at $kube_cache/NAME-$kube_version. The version
# variables make /version and each binary's --version say v1.37.2, as a
# release build does (hack/lib/version.sh sets them).
build_kube() {
  local v=k8s.io/component-base/version pkgs=() dir out start name
  for name in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$name"); done
  dir=$(build_dir kubebuild "$*" "$(for name in "$@"; do kube_var "$name"; done | paste -sd, -) to binaries of Kubernetes 1.37.x")
  mkdir -p "$kube_cache"
  out=$(mktemp -d "$kube_cache/.kube-build.XXXXXX")
  start=$SECONDS
  if ! (cd "$dir" && go build -trimpath -o "$out/" \
      -ldflags "-X $v.gitVersion=v$kube_version -X $v.gitMajor=1 -X $v.gitMinor=37 -X $v.gitTreeState=clean" "${pkgs[@]}"); then
    rm -rf "$out"
    return 1
  fi
  for name in "$@"; do mv "$out/$name" "$kube_cache/$name-$kube_version"; done
  rm -rf "$out"
  echo "ci/setup.sh: $* built in $((SECONDS - start))s into $kube_cache"
}

logs=$(mktemp -d "${TMPDIR:-/tmp}/locksuite-setup-XXXXXX")
builds=()
# Builds still running when the script ends early are stopped, and their
# logs removed.
trap 'for p in "${builds[@]}"; do kill "${p%%:*}" 2>/dev/null || true; done; rm -rf "$logs"' EXIT

# The builds first, in the background; the Kubernetes components in one go
# build, so that they share its compile.
kube_todo=()
for item in "${todo[@]}"; do
  read -r how what <<<"$item"
  [ "$how" = build ] || continue
  case $what in
    consul)
      echo "ci/setup.sh: building consul 1.13.9 from source (about 7 minutes, once) into $consul_bin"
      build "$consul_bin" consul 1.13.9 consulbuild "LOCKSUITE_CONSUL to a consul 1.13.x binary" github.com/hashicorp/consul \
        >"$logs/consul" 2>&1 &
      ;;
    kube-apiserver | kubelet | kube-controller-manager | kube-scheduler)
      kube_todo+=("$what")
      continue
      ;;
  esac
  builds+=("$!:$what")
done
if [ ${#kube_todo[@]} -gt 0 ]; then
  echo "ci/setup.sh: building ${kube_todo[*]} $kube_version from source in one go build (kube-apiserver alone: about 5 minutes on an idle 2-core machine; each further component adds a few) into $kube_cache"
  build_kube "${kube_todo[@]}" >"$logs/kubernetes" 2>&1 &
  builds+=("$!:kubernetes")
fi

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "ci/setup.sh: need root to run: $*" >&2; return 1; fi
}

# Then the packages, with one apt-get install.
pkgs=()
for item in "${todo[@]}"; do
  read -r how what <<<"$item"
  if [ "$how" = apt ]; then pkgs+=("$what"); fi
done
if [ ${#pkgs[@]} -gt 0 ]; then
  as_root apt-get update -qq
  for i in "${!pkgs[@]}"; do
    # PostgreSQL 15 where the distribution has it (Debian 12), else its own.
    if [ "${pkgs[$i]}" = postgresql-15 ] && ! apt-cache show postgresql-15 >/dev/null 2>&1; then pkgs[i]=postgresql; fi
  done
  echo "ci/setup.sh: installing ${pkgs[*]}"
  # No recommends: zookeeper's would pull in the zookeeperd service; the
  # harness needs none.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  # Debian's packages may start system servers; the harness starts its own.
  for p in "${pkgs[@]}"; do
    case $p in
      redis-server | redis-sentinel) svc=$p ;;
      postgresql*) svc=postgresql ;;
      mariadb-server) svc=mariadb ;;
      memcached) svc=memcached ;;
      containerd) svc=containerd ;; # the cluster's node runs a containerd of its own
      pgbouncer) svc=pgbouncer ;;
      *) continue ;;
    esac
    as_root service "$svc" stop >/dev/null 2>&1 || true
  done
fi

# Then wait for the builds: their log on failure, their summary otherwise.
failed=0
for b in "${builds[@]}"; do
  if wait "${b%%:*}"; then
    grep '^ci/setup.sh:' "$logs/${b#*:}" || true
  else
    echo "ci/setup.sh: building ${b#*:} failed:" >&2
    cat "$logs/${b#*:}" >&2
    failed=1
  fi
done
builds=()
[ "$failed" = 0 ] || exit 1

# todo_has ITEM reports whether ITEM was to do here.
todo_has() {
  local t
  for t in "${todo[@]}"; do if [ "$t" = "$1" ]; then return 0; fi; done
  return 1
}
for item in "${items[@]}"; do
  case $item in
    "build consul")
      if [ -n "${LOCKSUITE_CONSUL:-}" ]; then
        echo "ci/setup.sh: using LOCKSUITE_CONSUL=$LOCKSUITE_CONSUL"
      elif ! todo_has "$item"; then
        echo "ci/setup.sh: consul 1.13.9 cached at $consul_bin"
      fi
      "$consul_bin" version 2>/dev/null | head -1 || true
      ;;
    "build kube-apiserver" | "build kubelet" | "build kube-controller-manager" | "build kube-scheduler")
      c=${item#build }
      var=$(kube_var "$c")
      bin=${!var:-$kube_cache/$c-$kube_version}
      if [ -n "${!var:-}" ]; then
        echo "ci/setup.sh: using $var=${!var}"
      elif ! todo_has "$item"; then
        echo "ci/setup.sh: $c $kube_version cached at $bin"
      fi
      "$bin" --version 2>/dev/null || true
      ;;
  esac
done
