#!/usr/bin/env bash
# Build, start and stop a real kube-apiserver with its etcd on 127.0.0.1, for the Kubernetes
# connector's tests and for local development. No kubelet, scheduler or controller manager runs:
# tests write Node objects and pod status through the API as a kubelet would.
#
#   kube.sh build        build kube-apiserver and etcd from source through the Go module proxy into
#                        the cache (idempotent: skipped when the binaries are there)
#   kube.sh start DIR    start etcd and kube-apiserver with their state in DIR; prints the https URL
#   kube.sh stop DIR     stop both (idempotent)
#
# Environment:
#   KUBE_VERSION         Kubernetes version (default 1.35.4)
#   ETCD_VERSION         etcd version (default 3.6.16)
#   FEDSCHED_CACHE       cache root (default $HOME/.cache/fedsched); binaries go to
#                        $FEDSCHED_CACHE/kube/bin/{kube-apiserver-$KUBE_VERSION,etcd-$ETCD_VERSION}
#   GO                   go command (default go); GOFLAGS defaults to -p=2 for small machines
#   KUBE_START_TIMEOUT   seconds to wait for /readyz (default 90)
#   KUBE_STOP_TIMEOUT    seconds to wait after SIGTERM before SIGKILL (default 20)
#   KUBE_PORT            API server port for `start` (default: the port of the previous start in DIR,
#                        else a free one), so a restart on the same DIR keeps its URL
#
# The build uses wrapper Go modules outside the repository. k8s.io/kubernetes requires its staging
# modules (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0 and replaces them with local paths, which only
# work inside its own repository; the wrapper replaces each with the published v0.<minor>.<patch>.
#
# DIR layout: etcd/ (data), pki/ (CA, serving cert, service-account key), tokens.csv, etcd.log,
# apiserver.log, etcd.pid, apiserver.pid, ports; and for clients: server (https URL), token (admin
# bearer token, system:masters), connector-token (a user with no rights until RBAC grants them:
# "fedsched-connector" in group "fedsched:connectors"), ca.crt, kubeconfig (admin),
# connector.kubeconfig.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
FEDSCHED_CACHE="${FEDSCHED_CACHE:-${HOME:?HOME is not set}/.cache/fedsched}"
KUBE_CACHE="$FEDSCHED_CACHE/kube"
BIN="$KUBE_CACHE/bin"
APISERVER_BIN="$BIN/kube-apiserver-$KUBE_VERSION"
ETCD_BIN="$BIN/etcd-$ETCD_VERSION"
GO="${GO:-go}"
KUBE_START_TIMEOUT="${KUBE_START_TIMEOUT:-90}"
KUBE_STOP_TIMEOUT="${KUBE_STOP_TIMEOUT:-20}"

log() { echo "kube.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# build

# Staging modules of k8s.io/kubernetes, read from its go.mod: the `k8s.io/x => ./staging/...` lines.
staging_modules() {  # staging_modules GOMOD
    sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$1" | sort -u
}

build_apiserver() {
    local work="$KUBE_CACHE/src/kube-apiserver-$KUBE_VERSION" gomod minor patch mods m
    minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
    patch="$(echo "$KUBE_VERSION" | cut -d. -f3)"
    mkdir -p "$work"
    log "building kube-apiserver v$KUBE_VERSION in $work"
    (
        cd "$work"
        rm -f go.mod go.sum
        "$GO" mod init local.fedsched/kube-apiserver >/dev/null 2>&1
        gomod="$("$GO" mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
        [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@v$KUBE_VERSION"
        mods="$(staging_modules "$gomod")"
        [[ -n "$mods" ]] || die "no staging modules found in $gomod"
        local edits=("-require=k8s.io/kubernetes@v$KUBE_VERSION")
        for m in $mods; do edits+=("-replace=$m=$m@v0.$minor.$patch"); done
        # The Go version the Kubernetes module asks for.
        edits+=("-go=$(sed -n 's/^go //p' "$gomod")")
        "$GO" mod edit "${edits[@]}"
        "$GO" get "k8s.io/kubernetes/cmd/kube-apiserver@v$KUBE_VERSION"
        local pkg=k8s.io/component-base/version
        CGO_ENABLED=0 "$GO" build -trimpath -o "$APISERVER_BIN.tmp" \
            -ldflags "-s -w -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
                      -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z" \
            k8s.io/kubernetes/cmd/kube-apiserver
    )
    mv -f "$APISERVER_BIN.tmp" "$APISERVER_BIN"
}

build_etcd() {
    local work="$KUBE_CACHE/src/etcd-$ETCD_VERSION"
    mkdir -p "$work"
    log "building etcd v$ETCD_VERSION in $work"
    (
        cd "$work"
        rm -f go.mod go.sum
        "$GO" mod init local.fedsched/etcd >/dev/null 2>&1
        "$GO" get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
        CGO_ENABLED=0 "$GO" build -trimpath -o "$ETCD_BIN.tmp" -ldflags "-s -w" go.etcd.io/etcd/server/v3
    )
    mv -f "$ETCD_BIN.tmp" "$ETCD_BIN"
}

do_build_locked() {
    command -v "$GO" >/dev/null 2>&1 || die "go ($GO) not found"
    export GOFLAGS="${GOFLAGS:--p=2} -mod=mod"
    export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
    local t0=$SECONDS
    [[ -x "$ETCD_BIN" && -f "$ETCD_BIN.ok" ]] || { build_etcd && "$ETCD_BIN" --version >"$ETCD_BIN.ok"; }
    [[ -x "$APISERVER_BIN" && -f "$APISERVER_BIN.ok" ]] \
        || { build_apiserver && "$APISERVER_BIN" --version >"$APISERVER_BIN.ok"; }
    log "binaries ready in $BIN ($((SECONDS - t0)) s)"
}

built() { [[ -f "$ETCD_BIN.ok" && -f "$APISERVER_BIN.ok" ]]; }

cmd_build() {
    mkdir -p "$BIN"
    built && return 0
    if command -v flock >/dev/null 2>&1; then
        # Serialise concurrent builds (parallel test runs).
        (
            flock 9
            built || do_build_locked
        ) 9>"$KUBE_CACHE/.build.lock"
    else
        (do_build_locked)
    fi
    built || die "build did not complete"
}

# ---------------------------------------------------------------------------------------------
# start / stop

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

port_free() {  # true if 127.0.0.1:$1 can be bound
    python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError: sys.exit(1)' "$1"
}

alive() {  # true if pid $1 runs; a zombie counts as gone
    kill -0 "$1" 2>/dev/null || return 1
    if [[ -r "/proc/$1/stat" ]]; then
        local stat
        stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
        stat="${stat##*) }"
        [[ "${stat%% *}" != Z ]]
    fi
}

running_pid() {  # running_pid DIR NAME: pid in DIR/NAME.pid if that process still runs on DIR
    local dir="$1" name="$2" pid
    [[ -f "$dir/$name.pid" ]] || { echo ""; return 0; }
    pid="$(cat "$dir/$name.pid" 2>/dev/null || true)"
    # Guard against pid reuse: the process's command line names DIR.
    if [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" \
        && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$dir/"; then
        echo "$pid"
    else
        echo ""
    fi
}

# Certificates, keys and tokens are made once per DIR and kept across restarts.
make_pki() {
    local dir="$1" pki="$1/pki"
    [[ -f "$pki/.complete" ]] && return 0
    command -v openssl >/dev/null 2>&1 || die "openssl not found"
    rm -rf "$pki" && mkdir -p "$pki"
    (
        cd "$pki"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
            -subj "/CN=fedsched-test-ca" 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr \
            -subj "/CN=kube-apiserver" 2>/dev/null
        {
            echo "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
            echo "extendedKeyUsage=serverAuth"
            echo "keyUsage=digitalSignature,keyEncipherment"
        } >apiserver.ext
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt \
            -days 3650 -extfile apiserver.ext 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        chmod 600 ca.key apiserver.key sa.key
        touch .complete
    )
    cp "$pki/ca.crt" "$dir/ca.crt"
    local admin connector
    admin="$(openssl rand -hex 24)"
    connector="$(openssl rand -hex 24)"
    # token,user,uid,"groups"
    {
        echo "$admin,fedsched-admin,fedsched-admin,\"system:masters\""
        echo "$connector,fedsched-connector,fedsched-connector,\"fedsched:connectors\""
    } >"$dir/tokens.csv"
    echo "$admin" >"$dir/token"
    echo "$connector" >"$dir/connector-token"
    chmod 600 "$dir/tokens.csv" "$dir/token" "$dir/connector-token"
}

write_kubeconfig() {  # write_kubeconfig FILE URL CA TOKEN USER
    cat >"$1" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: fedsched-test
  cluster:
    server: $2
    certificate-authority: $3
users:
- name: $5
  user:
    token: $4
contexts:
- name: $5@fedsched-test
  context:
    cluster: fedsched-test
    user: $5
current-context: $5@fedsched-test
KUBECONFIG
    chmod 600 "$1"
}

show_logs() {  # show_logs DIR MESSAGE
    log "$2"
    local f
    for f in etcd.log apiserver.log; do
        if [[ -s "$1/$f" ]]; then
            log "--- tail of $1/$f"
            tail -n 40 "$1/$f" >&2 || true
        fi
    done
}

spawn() {  # spawn DIR NAME LOGFILE CMD...: run CMD in its own session; pid in DIR/NAME.pid
    local dir="$1" name="$2" logfile="$3" deadline
    shift 3
    rm -f "$dir/$name.pid"
    # setsid: its own session and process group (pgid == pid), no inherited stdio, so callers that
    # capture our output do not hang.
    # shellcheck disable=SC2016
    setsid bash -c 'echo $$ >"$1.tmp"; mv "$1.tmp" "$1"; shift; exec "$@"' _ "$dir/$name.pid" "$@" \
        </dev/null >>"$logfile" 2>&1 &
    disown $! 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while [[ ! -s "$dir/$name.pid" ]]; do
        ((SECONDS < deadline)) || die "$name did not start"
        sleep 0.05
    done
}

readyz() {  # readyz DIR PORT: true when /readyz answers ok
    curl -sf --max-time 2 --cacert "$1/ca.crt" -H "Authorization: Bearer $(cat "$1/token")" \
        "https://127.0.0.1:$2/readyz" >/dev/null 2>&1
}

start_etcd() {  # start_etcd DIR CLIENT_PORT PEER_PORT
    local dir="$1" cport="$2" pport="$3" deadline pid
    if [[ -f "$dir/etcd.log" ]]; then mv -f "$dir/etcd.log" "$dir/etcd.log.prev"; fi
    spawn "$dir" etcd "$dir/etcd.log" "$ETCD_BIN" --name fedsched --data-dir "$dir/etcd" \
        --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
        --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
        --initial-cluster "fedsched=http://127.0.0.1:$pport" \
        --log-level warn --quota-backend-bytes 2147483648
    pid="$(cat "$dir/etcd.pid")"
    deadline=$((SECONDS + KUBE_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! alive "$pid"; then
            grep -q 'address already in use' "$dir/etcd.log" 2>/dev/null && return 2
            show_logs "$dir" "etcd exited during startup"
            return 1
        fi
        curl -sf --max-time 2 "http://127.0.0.1:$cport/health" 2>/dev/null | grep -q '"health":"true"' && return 0
        sleep 0.1
    done
    show_logs "$dir" "etcd did not come up within ${KUBE_START_TIMEOUT}s"
    return 1
}

start_apiserver() {  # start_apiserver DIR PORT ETCD_PORT
    local dir="$1" port="$2" cport="$3" deadline pid pki="$1/pki"
    if [[ -f "$dir/apiserver.log" ]]; then mv -f "$dir/apiserver.log" "$dir/apiserver.log.prev"; fi
    # No controller manager runs, so nobody creates each namespace's "default" service account: the
    # ServiceAccount admission plugin is off. The rest is the default admission chain. On SIGTERM, open
    # watches are ended within 2 s instead of holding the shutdown until their timeouts.
    spawn "$dir" apiserver "$dir/apiserver.log" "$APISERVER_BIN" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$port" \
        --etcd-servers "http://127.0.0.1:$cport" --etcd-prefix /registry \
        --cert-dir "$pki" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
        --client-ca-file "$pki/ca.crt" --token-auth-file "$dir/tokens.csv" \
        --authorization-mode Node,RBAC --anonymous-auth=false \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
        --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true \
        --disable-admission-plugins ServiceAccount \
        --shutdown-watch-termination-grace-period 2s \
        --profiling=false --v 1
    pid="$(cat "$dir/apiserver.pid")"
    deadline=$((SECONDS + KUBE_START_TIMEOUT))
    while ((SECONDS < deadline)); do
        if ! alive "$pid"; then
            grep -q 'address already in use' "$dir/apiserver.log" 2>/dev/null && return 2
            show_logs "$dir" "kube-apiserver exited during startup"
            return 1
        fi
        readyz "$dir" "$port" && return 0
        sleep 0.2
    done
    show_logs "$dir" "kube-apiserver did not become ready within ${KUBE_START_TIMEOUT}s"
    return 1
}

port_of() {  # port_of DIR NAME: the port NAME used in DIR's previous start, or empty
    [[ -f "$1/ports" ]] || { echo ""; return 0; }
    sed -n "s/^$2=//p" "$1/ports" | tail -n 1
}

pick_port() {  # pick_port PREVIOUS: PREVIOUS if it is still free, else a new free port
    if [[ "$1" =~ ^[0-9]+$ ]] && port_free "$1"; then echo "$1"; else free_port; fi
}

cmd_start() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: kube.sh start DIR"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd -P)"
    if [[ -n "$(running_pid "$dir" apiserver)" && -s "$dir/server" ]] && readyz "$dir" "$(port_of "$dir" api)"; then
        cat "$dir/server"  # already running
        return 0
    fi
    cmd_stop "$dir"
    built || cmd_build
    command -v curl >/dev/null 2>&1 || die "curl not found"
    command -v python3 >/dev/null 2>&1 || die "python3 not found (used to pick free ports)"
    make_pki "$dir"

    # A restart on an existing DIR keeps its ports when they are free, so clients keep the URL.
    local api cport pport attempt rc t0=$SECONDS
    api="${KUBE_PORT:-$(port_of "$dir" api)}"
    cport="$(port_of "$dir" etcd)"
    pport="$(port_of "$dir" etcd_peer)"
    for attempt in 1 2 3 4 5; do
        cport="$(pick_port "$cport")"
        pport="$(pick_port "$pport")"
        while [[ "$pport" == "$cport" ]]; do pport="$(free_port)"; done
        api="$(pick_port "$api")"
        while [[ "$api" == "$cport" || "$api" == "$pport" ]]; do api="$(free_port)"; done
        printf 'api=%s\netcd=%s\netcd_peer=%s\n' "$api" "$cport" "$pport" >"$dir/ports"
        rc=0
        start_etcd "$dir" "$cport" "$pport" || rc=$?
        if [[ "$rc" == 0 ]]; then
            start_apiserver "$dir" "$api" "$cport" || rc=$?
        fi
        case "$rc" in
            0) break ;;
            2) log "port clash on attempt $attempt, retrying with other ports"; cmd_stop "$dir"
               api=""; cport=""; pport="" ;;
            *) cmd_stop "$dir"; exit 1 ;;
        esac
        if [[ "$attempt" == 5 ]]; then cmd_stop "$dir"; die "could not bind free ports after 5 attempts"; fi
    done

    local url="https://127.0.0.1:$api"
    echo "$url" >"$dir/server"
    write_kubeconfig "$dir/kubeconfig" "$url" "$dir/ca.crt" "$(cat "$dir/token")" fedsched-admin
    write_kubeconfig "$dir/connector.kubeconfig" "$url" "$dir/ca.crt" "$(cat "$dir/connector-token")" \
        fedsched-connector
    log "kube-apiserver v$KUBE_VERSION ready at $url ($((SECONDS - t0)) s)"
    echo "$url"
}

stop_one() {  # stop_one DIR NAME: TERM the process group, wait, then KILL
    local dir="$1" name="$2" pid deadline
    pid="$(running_pid "$dir" "$name")"
    if [[ -n "$pid" ]]; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + KUBE_STOP_TIMEOUT))
        while alive "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
        if alive "$pid"; then
            log "$name ($pid) did not stop within ${KUBE_STOP_TIMEOUT}s, killing it"
            kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
            deadline=$((SECONDS + 10))
            while alive "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
        fi
    fi
    rm -f "$dir/$name.pid"
}

cmd_stop() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: kube.sh stop DIR"
    [[ -d "$dir" ]] || return 0
    dir="$(cd "$dir" && pwd -P)"
    stop_one "$dir" apiserver
    stop_one "$dir" etcd
}

case "${1:-}" in
    build) cmd_build ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    *)
        echo "usage: kube.sh build | start DIR | stop DIR   (env KUBE_VERSION, default $KUBE_VERSION)" >&2
        exit 2
        ;;
esac
