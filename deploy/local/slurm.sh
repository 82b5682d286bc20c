#!/usr/bin/env bash
# Install, start and stop a real single-host Slurm (slurmctld, several slurmd, slurmrestd and its own
# munged) from Debian's packages, for the Slurm connector's tests and for local development.
#
#   slurm.sh install      apt-get install the packages when missing (root, Debian/Ubuntu only)
#   slurm.sh start DIR    start munged, slurmctld, one slurmd per node and slurmrestd with all state in
#                         DIR; waits until the REST API answers and every node responds (idle on a new
#                         DIR); prints the URL
#   slurm.sh stop DIR     stop everything started in DIR, and the job processes of that cluster
#   slurm.sh status DIR   what runs in DIR, and the nodes as the controller sees them
#
# Environment:
#   SLURM_NODES           the nodes, space-separated NAME:CPUS:MEMORY_MB:GPU_MODEL:GPU_COUNT[:FEATURE,...]
#                         (default "n1:32:262144:a100:4:nvlink n2:32:262144:a100:4:nvlink
#                         n3:16:131072:h100:2"); a GPU count of 0 means no GPU. Each node also carries a
#                         feature equal to its name, so a job is pinned to it with that constraint.
#   SLURM_TOKEN_USER      user the REST token is made for, and so the user jobs run as (default fedsched,
#                         created as a system user when missing, so test jobs do not run as root)
#   SLURM_TOKEN_LIFESPAN  token lifespan in seconds (default 2592000, 30 days)
#   SLURM_START_TIMEOUT   seconds to wait for the REST API and every node (default 60)
#   SLURM_STOP_TIMEOUT    seconds to wait after SIGTERM before SIGKILL (default 15)
#   SLURM_REST_PORT       slurmrestd port (default: the previous start's in DIR if free, else a free one)
#   FEDSCHED_CACHE        cache root (default $HOME/.cache/fedsched); the install's lock and apt log go
#                         to $FEDSCHED_CACHE/slurm (the packages themselves are the system's)
#
# Several nodes run on one host: one `slurmd -N NAME` each, on its own port (Debian's build allows
# multiple slurmd). `SlurmdParameters=config_overrides` lets the configured CPUs and memory beat the
# real ones. GPU GRES needs `File=` character devices (count-only GRES is refused: "gres/gpu count
# reported lower than configured"), so the script makes them with mknod in DIR/dev (c 1 3, as
# /dev/null: nothing opens them). slurmrestd refuses to run as root and runs as nobody:nogroup with
# JWT authentication; clients send X-SLURM-USER-NAME and X-SLURM-USER-TOKEN. DIR and the folders above
# it are made traversable by others (o+x) for slurmrestd: put DIR under /tmp.
#
# DIR layout: etc/ (slurm.conf, gres.conf, cgroup.conf, plugstack.conf, jwt.key), munge/ (key,
# socket), state/ (StateSaveLocation), spool/NAME/, dev/NAME/gpuN, log/ (munged.log, slurmctld.log,
# slurmd-NAME.log, slurmrestd.log), run/ (pid files), ports; and for clients: url (http://127.0.0.1:PORT),
# token (the JWT, mode 600), user (the token's user), cluster (ClusterName), jobs/ (owned by that user,
# for job output).
set -euo pipefail

SLURM_NODES="${SLURM_NODES:-n1:32:262144:a100:4:nvlink n2:32:262144:a100:4:nvlink n3:16:131072:h100:2}"
SLURM_TOKEN_USER="${SLURM_TOKEN_USER:-fedsched}"
SLURM_TOKEN_LIFESPAN="${SLURM_TOKEN_LIFESPAN:-2592000}"
SLURM_START_TIMEOUT="${SLURM_START_TIMEOUT:-60}"
SLURM_STOP_TIMEOUT="${SLURM_STOP_TIMEOUT:-15}"
FEDSCHED_CACHE="${FEDSCHED_CACHE:-${HOME:?HOME is not set}/.cache/fedsched}"
SLURM_CACHE="$FEDSCHED_CACHE/slurm"
PACKAGES=(slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin munge)
API=v0.0.38

log() { echo "slurm.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# install

missing_packages() {
    local p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

installed() {
    command -v dpkg-query >/dev/null 2>&1 && [[ -z "$(missing_packages)" ]]
}

cmd_install() {
    installed && return 0
    command -v apt-get >/dev/null 2>&1 \
        || die "apt-get not found: install Slurm 22.05 (slurmctld, slurmd, slurmrestd, the auth/jwt plugin) and munge yourself"
    [[ "$(id -u)" == 0 ]] || die "installing packages needs root (missing: $(missing_packages | tr '\n' ' '))"
    local missing t0=$SECONDS
    mapfile -t missing < <(missing_packages)
    mkdir -p "$SLURM_CACHE"
    local apt_log="$SLURM_CACHE/apt.log"
    log "installing ${missing[*]} with apt-get"
    (
        # Serialise concurrent installs (parallel test runs); dpkg would refuse the second anyway.
        flock 9
        installed && exit 0
        export DEBIAN_FRONTEND=noninteractive
        # A stale package index is the usual reason for a failure: update it once and try again.
        if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$apt_log" 2>&1; then
            apt-get update -q >>"$apt_log" 2>&1 || true
            apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$apt_log" 2>&1 \
                || { tail -n 30 "$apt_log" >&2; exit 1; }
        fi
    ) 9>"$SLURM_CACHE/.install.lock" || die "apt-get install failed (log: $apt_log)"
    installed || die "packages still missing after apt-get: $(missing_packages | tr '\n' ' ')"
    log "installed in $((SECONDS - t0)) s: $(slurmctld -V)"
}

# ---------------------------------------------------------------------------------------------
# helpers

free_port() {  # a port free on every address (slurmctld and slurmd listen on all of them)
    python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1]); s.close()'
}

port_free() {
    python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(("", int(sys.argv[1])))
except OSError: sys.exit(1)' "$1"
}

alive() {  # true if pid $1 runs; a zombie counts as gone
    kill -0 "$1" 2>/dev/null || return 1
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat%% *}" != Z ]]
}

# Every process of this cluster carries FEDSCHED_SLURM_DIR=DIR in its environment (daemons get it
# from us; slurmstepd inherits it from slurmd); job processes carry SLURM_CONF=DIR/etc/slurm.conf.
ours() {  # ours DIR PID: true if PID belongs to the cluster in DIR
    [[ -r "/proc/$2/environ" ]] || return 1
    { tr '\0' '\n' <"/proc/$2/environ"; } 2>/dev/null \
        | grep -qxF -e "FEDSCHED_SLURM_DIR=$1" -e "SLURM_CONF=$1/etc/slurm.conf"
}

running_pid() {  # running_pid DIR NAME: pid in DIR/run/NAME.pid if that process is still ours
    local pid
    pid="$(cat "$1/run/$2.pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" && ours "$1" "$pid"; then echo "$pid"; else echo ""; fi
}

spawn() {  # spawn DIR NAME CMD...: run CMD in its own session, output to DIR/log/NAME.out
    local dir="$1" name="$2" deadline
    shift 2
    rm -f "$dir/run/$name.pid"
    # shellcheck disable=SC2016
    FEDSCHED_SLURM_DIR="$dir" SLURM_CONF="$dir/etc/slurm.conf" \
        setsid bash -c 'echo $$ >"$1.tmp"; mv "$1.tmp" "$1"; shift; exec "$@"' _ "$dir/run/$name.pid" "$@" \
        </dev/null >>"$dir/log/$name.out" 2>&1 &
    disown $! 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while [[ ! -s "$dir/run/$name.pid" ]]; do
        ((SECONDS < deadline)) || die "$name did not start"
        sleep 0.05
    done
}

show_logs() {  # show_logs DIR MESSAGE
    log "$2"
    local f
    for f in "$1"/log/*; do
        [[ -s "$f" && "$f" != *.prev ]] || continue
        log "--- tail of $f"
        tail -n 25 "$f" >&2 || true
    done
}

rest() {  # rest DIR PATH: GET the REST API with the token in DIR
    curl -sf --max-time 5 -H "X-SLURM-USER-NAME: $(cat "$1/user")" -H "X-SLURM-USER-TOKEN: $(cat "$1/token")" \
        "$(cat "$1/url")/slurm/$API/$2"
}

# Node specs, validated: NAME CPUS MEMORY GPU_MODEL GPU_COUNT FEATURES per line.
node_specs() {
    local spec name cpus mem model count features
    for spec in $SLURM_NODES; do
        IFS=: read -r name cpus mem model count features <<<"$spec"
        [[ "$name" =~ ^[a-z][a-z0-9]*$ ]] || die "SLURM_NODES: node name '$name' must be lowercase letters and digits"
        [[ "$cpus" =~ ^[1-9][0-9]*$ ]] || die "SLURM_NODES: CPUs of $name must be a positive integer, not '$cpus'"
        [[ "$mem" =~ ^[1-9][0-9]*$ ]] || die "SLURM_NODES: memory (MB) of $name must be a positive integer, not '$mem'"
        [[ "${count:-0}" =~ ^[0-9]+$ ]] || die "SLURM_NODES: GPU count of $name must be an integer, not '$count'"
        if [[ "${count:-0}" != 0 ]]; then
            [[ "$model" =~ ^[a-z0-9_]+$ ]] || die "SLURM_NODES: GPU model of $name must be lowercase letters, digits, _ (not '$model')"
        fi
        [[ -z "$features" || "$features" =~ ^[a-z0-9_,]+$ ]] \
            || die "SLURM_NODES: features of $name must be lowercase letters, digits, _ separated by commas"
        echo "$name $cpus $mem ${model:-none} ${count:-0} ${features:-}"
    done
}

# ---------------------------------------------------------------------------------------------
# start

write_config() {  # write_config DIR CTLD_PORT: slurm.conf, gres.conf, cgroup.conf, devices
    local dir="$1" ctld_port="$2" name cpus mem model count features port i feat host
    host="$(hostname -s)"
    local nodes_conf="" gres_conf=""
    while read -r name cpus mem model count features; do
        port="$(sed -n "s/^slurmd_$name=//p" "$dir/ports")"
        feat="$name${features:+,$features}"
        nodes_conf+="NodeName=$name NodeHostname=$host NodeAddr=127.0.0.1 Port=$port CPUs=$cpus"
        nodes_conf+=" RealMemory=$mem Feature=$feat State=UNKNOWN"
        if [[ "$count" != 0 ]]; then
            nodes_conf+=" Gres=gpu:$model:$count"
            mkdir -p "$dir/dev/$name"
            for ((i = 0; i < count; i++)); do
                [[ -c "$dir/dev/$name/gpu$i" ]] || mknod "$dir/dev/$name/gpu$i" c 1 3
            done
            gres_conf+="NodeName=$name Name=gpu Type=$model File=$dir/dev/$name/gpu[0-$((count - 1))]"$'\n'
        fi
        nodes_conf+=$'\n'
        mkdir -p "$dir/spool/$name"
    done < <(node_specs)

    cat >"$dir/etc/slurm.conf" <<EOF
# Generated by slurm.sh: a single-host test cluster; everything it keeps is under $dir.
ClusterName=$(cat "$dir/cluster")
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket.2
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$dir/etc/jwt.key
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld-daemon.pid
SlurmdPidFile=$dir/run/slurmd-%n-daemon.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/etc/plugstack.conf
TmpFS=$dir/tmp
# No cgroups (the machine's are not ours to change): processes are tracked by their parents.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=10
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
SlurmctldTimeout=30
MessageTimeout=10
KillWait=5
MinJobAge=600
InactiveLimit=0
MailProg=/bin/true
$nodes_conf
PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    {
        echo "# Generated by slurm.sh. Character devices made with mknod stand in for GPUs."
        echo "AutoDetect=off"
        printf '%s' "$gres_conf"
    } >"$dir/etc/gres.conf"
    cat >"$dir/etc/cgroup.conf" <<EOF
# Generated by slurm.sh. proctrack/linuxproc and task/none use no cgroups, but slurmd 22.05 loads a
# cgroup plugin anyway; this file keeps the host's /etc/slurm/cgroup.conf out of this cluster.
CgroupPlugin=autodetect
IgnoreSystemd=yes
EOF
    : >"$dir/etc/plugstack.conf"
    chmod 644 "$dir"/etc/*.conf
}

start_munge() {
    local dir="$1" deadline pid
    if [[ ! -f "$dir/munge/munge.key" ]]; then
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
        chmod 400 "$dir/munge/munge.key"
    fi
    spawn "$dir" munged munged --foreground --force --key-file="$dir/munge/munge.key" \
        --socket="$dir/munge/munge.socket.2" --pid-file="$dir/run/munged-daemon.pid" \
        --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
    pid="$(cat "$dir/run/munged.pid")"
    deadline=$((SECONDS + 10))
    while ! munge -n -S "$dir/munge/munge.socket.2" </dev/null 2>/dev/null | unmunge -S "$dir/munge/munge.socket.2" >/dev/null 2>&1; do
        alive "$pid" || { show_logs "$dir" "munged exited during startup"; return 1; }
        ((SECONDS < deadline)) || { show_logs "$dir" "munged did not answer within 10 s"; return 1; }
        sleep 0.05
    done
}

port_clash() { grep -qiE 'address already in use' "$1"/log/*.log "$1"/log/*.out 2>/dev/null; }

# One attempt with the ports in DIR/ports; 0 when up, 2 on a port clash, 1 otherwise.
launch() {
    local dir="$1" rest_port ctld_port name deadline pid state
    rest_port="$(sed -n 's/^rest=//p' "$dir/ports")"
    ctld_port="$(sed -n 's/^slurmctld=//p' "$dir/ports")"
    write_config "$dir" "$ctld_port"
    local f
    for f in "$dir"/log/*; do [[ -f "$f" && "$f" != *.prev ]] && mv -f "$f" "$f.prev"; done

    start_munge "$dir" || return 1
    # -i: ignore job and node state of a previous start in DIR that does not fit this configuration.
    spawn "$dir" slurmctld slurmctld -D -i -f "$dir/etc/slurm.conf"
    while read -r name _; do
        spawn "$dir" "slurmd-$name" slurmd -D -N "$name" -f "$dir/etc/slurm.conf"
    done < <(node_specs)
    # SLURM_JWT=daemon: slurmrestd talks to the controller with auth/jwt, each request under the
    # token it came with; with auth/munge (slurm.conf's AuthType) it rejects every token ("Rejecting
    # thread config token for user").
    SLURM_JWT=daemon spawn "$dir" slurmrestd slurmrestd -f "$dir/etc/slurm.conf" -u nobody -g nogroup -a rest_auth/jwt \
        -s "openapi/$API" "127.0.0.1:$rest_port"
    echo "http://127.0.0.1:$rest_port" >"$dir/url"

    deadline=$((SECONDS + SLURM_START_TIMEOUT))
    local token_done=""
    while ((SECONDS < deadline)); do
        for f in "$dir"/run/*.pid; do
            [[ "$f" == *-daemon.pid ]] && continue
            name="$(basename "$f" .pid)"
            pid="$(cat "$f")"
            if ! alive "$pid"; then
                port_clash "$dir" && return 2
                show_logs "$dir" "$name exited during startup"
                return 1
            fi
        done
        if [[ -z "$token_done" ]]; then
            if SLURM_CONF="$dir/etc/slurm.conf" scontrol token lifespan="$SLURM_TOKEN_LIFESPAN" \
                username="$SLURM_TOKEN_USER" >"$dir/token.out" 2>&1; then
                (umask 077 && sed -n 's/^SLURM_JWT=//p' "$dir/token.out" >"$dir/token")
                [[ -s "$dir/token" ]] || { cat "$dir/token.out" >&2; log "scontrol token printed no SLURM_JWT"; return 1; }
                echo "$SLURM_TOKEN_USER" >"$dir/user"
                token_done=1
            fi
        fi
        if [[ -n "$token_done" ]] && state="$(rest "$dir" nodes 2>/dev/null)"; then
            # Every configured node must be known and responding: idle on a fresh DIR; a restart on a
            # DIR whose jobs still run (slurmstepd outlives its slurmd) finds them mixed or allocated.
            if python3 -c 'import json, sys
nodes = {n["name"]: n for n in json.load(sys.stdin)["nodes"]}
def up(n): return n["state"] in ("idle", "mixed", "allocated") and "NOT_RESPONDING" not in n["state_flags"]
sys.exit(0 if all(w in nodes and up(nodes[w]) for w in sys.argv[1].split()) else 1)' \
                "$(node_specs | cut -d' ' -f1 | tr '\n' ' ')" <<<"$state" 2>/dev/null; then
                return 0
            fi
        fi
        sleep 0.2
    done
    show_logs "$dir" "the REST API did not answer with every node up within ${SLURM_START_TIMEOUT}s (last: ${state:-no answer})"
    return 1
}

cmd_start() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: slurm.sh start DIR"
    [[ "$(id -u)" == 0 ]] || die "start needs root: slurmd runs jobs as their users and GPU devices are made with mknod"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd -P)"
    # munged's socket path must fit a sockaddr_un.
    ((${#dir} <= 80)) || die "DIR is too long for munge's socket path (at most 80 characters): $dir"
    if [[ -n "$(running_pid "$dir" slurmrestd)" && -s "$dir/url" ]] && rest "$dir" ping >/dev/null 2>&1; then
        cat "$dir/url"  # already running
        return 0
    fi
    cmd_stop "$dir"
    installed || die "Slurm is not installed: run 'slurm.sh install' (as root) first"
    command -v python3 >/dev/null 2>&1 || die "python3 not found (used to pick free ports)"
    command -v curl >/dev/null 2>&1 || die "curl not found"
    getent passwd nobody >/dev/null && getent group nogroup >/dev/null \
        || die "slurmrestd runs as nobody:nogroup, which this machine lacks"
    node_specs >/dev/null
    if ! getent passwd "$SLURM_TOKEN_USER" >/dev/null; then
        [[ "$SLURM_TOKEN_USER" == fedsched ]] || die "SLURM_TOKEN_USER: no such user '$SLURM_TOKEN_USER'"
        log "creating the system user fedsched (jobs of the test cluster run as it)"
        useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin fedsched \
            || getent passwd fedsched >/dev/null || die "could not create the user fedsched"
    fi

    mkdir -p "$dir"/{etc,munge,state,spool,dev,log,run,tmp,jobs}
    # Jobs run as SLURM_TOKEN_USER; their working folder and output go here unless they say otherwise.
    chown "$SLURM_TOKEN_USER:" "$dir/jobs"
    chmod 700 "$dir/state"
    # slurmrestd reads etc/slurm.conf as nobody: DIR and the folders above it must be traversable.
    chmod o+x "$dir" "$dir/etc"
    local up="$dir"
    while [[ "$up" != / ]]; do
        up="$(dirname "$up")"
        others_can_traverse "$up" || chmod o+x "$up"
    done
    # munged refuses a socket folder others can write to; this one is ours alone.
    chmod 755 "$dir/munge"
    [[ -f "$dir/cluster" ]] || echo "fs$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')" >"$dir/cluster"
    if [[ ! -f "$dir/etc/jwt.key" ]]; then
        (umask 077 && dd if=/dev/urandom of="$dir/etc/jwt.key" bs=32 count=1 status=none)
    fi

    local attempt rc t0=$SECONDS rest_port name
    for attempt in 1 2 3 4 5; do
        rest_port="${SLURM_REST_PORT:-$(sed -n 's/^rest=//p' "$dir/ports" 2>/dev/null || true)}"
        if [[ ! "$rest_port" =~ ^[0-9]+$ ]] || ! port_free "$rest_port"; then rest_port="$(free_port)"; fi
        {
            echo "rest=$rest_port"
            echo "slurmctld=$(free_port)"
            while read -r name _; do echo "slurmd_$name=$(free_port)"; done < <(node_specs)
        } >"$dir/ports"
        if [[ "$(cut -d= -f2 "$dir/ports" | sort | uniq -d)" != "" ]]; then continue; fi
        rc=0
        launch "$dir" || rc=$?
        case "$rc" in
            0) break ;;
            2) log "port clash on attempt $attempt, retrying with other ports"; cmd_stop "$dir"; rm -f "$dir/ports" ;;
            *) cmd_stop "$dir"; exit 1 ;;
        esac
        if [[ "$attempt" == 5 ]]; then cmd_stop "$dir"; die "could not bind free ports after 5 attempts"; fi
    done
    log "Slurm $(slurmctld -V | cut -d' ' -f2) cluster $(cat "$dir/cluster") ready at $(cat "$dir/url")" \
        "($(node_specs | wc -l) nodes, $((SECONDS - t0)) s); token in $dir/token"
    cat "$dir/url"
}

others_can_traverse() {  # true if others may traverse folder $1
    [[ "$(stat -c %A "$1")" =~ ^d.{7}[xt] ]]
}

# ---------------------------------------------------------------------------------------------
# stop / status

stop_pids() {  # stop_pids DIR LABEL PID...: TERM, wait, then KILL
    local dir="$1" label="$2" deadline p left
    shift 2
    (($#)) || return 0
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    deadline=$((SECONDS + SLURM_STOP_TIMEOUT))
    while ((SECONDS < deadline)); do
        left=""
        for p in "$@"; do alive "$p" && left=1; done
        [[ -n "$left" ]] || return 0
        sleep 0.05
    done
    log "$label did not stop within ${SLURM_STOP_TIMEOUT}s, killing it"
    for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
}

cluster_pids() {  # every process of the cluster in DIR (job steps and job processes included)
    local p
    for p in /proc/[0-9]*; do
        p="${p#/proc/}"
        [[ "$p" != "$$" ]] && ours "$1" "$p" && echo "$p"
    done
    return 0
}

cmd_stop() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: slurm.sh stop DIR"
    [[ -d "$dir" ]] || return 0
    dir="$(cd "$dir" && pwd -P)"
    local f name pid pids=()
    # The REST daemon first (no new work), then the node daemons and the controller, munged last.
    for name in slurmrestd slurmd slurmctld munged; do
        pids=()
        for f in "$dir"/run/"$name"*.pid; do
            [[ -f "$f" && "$f" != *-daemon.pid ]] || continue
            pid="$(running_pid "$dir" "$(basename "$f" .pid)")"
            [[ -n "$pid" ]] && pids+=("$pid")
        done
        stop_pids "$dir" "$name" "${pids[@]}"
    done
    # What is left are job steps (slurmstepd, which outlives SIGTERM retrying to report to the gone
    # controller) and their job processes: nothing of value once the cluster is gone.
    local deadline=$((SECONDS + SLURM_STOP_TIMEOUT))
    mapfile -t pids < <(cluster_pids "$dir")
    while ((${#pids[@]} > 0)); do
        kill -KILL "${pids[@]}" 2>/dev/null || true
        ((SECONDS < deadline)) || die "processes of $dir survive SIGKILL: ${pids[*]}"
        sleep 0.05
        mapfile -t pids < <(cluster_pids "$dir")
    done
    rm -f "$dir"/run/*.pid
}

cmd_status() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: slurm.sh status DIR"
    [[ -d "$dir" ]] || die "no such folder: $dir"
    dir="$(cd "$dir" && pwd -P)"
    local f name pid rc=0
    compgen -G "$dir/run/*.pid" >/dev/null || { echo "nothing runs in $dir"; return 1; }
    for f in "$dir"/run/*.pid; do
        [[ -f "$f" && "$f" != *-daemon.pid ]] || continue
        name="$(basename "$f" .pid)"
        pid="$(running_pid "$dir" "$name")"
        if [[ -n "$pid" ]]; then echo "$name: running (pid $pid)"; else echo "$name: stopped"; rc=1; fi
    done
    [[ -s "$dir/url" ]] && echo "url: $(cat "$dir/url")  cluster: $(cat "$dir/cluster" 2>/dev/null)"
    if [[ -s "$dir/etc/slurm.conf" ]] && SLURM_CONF="$dir/etc/slurm.conf" sinfo -N -o '%N %t %c %m %G %f' 2>/dev/null; then
        :
    else
        echo "controller: not answering"
        rc=1
    fi
    return "$rc"
}

case "${1:-}" in
    install) cmd_install ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    status) shift; cmd_status "$@" ;;
    *)
        echo "usage: slurm.sh install | start DIR | stop DIR | status DIR" >&2
        exit 2
        ;;
esac
