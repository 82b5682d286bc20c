#!/usr/bin/env bash
# Fetch, start and stop a real single-node Apache Kafka broker (KRaft, broker+controller in one
# process) on 127.0.0.1, for tests and local development.
#
#   kafka.sh fetch        download the jars from Maven Central into the cache (idempotent)
#   kafka.sh start DIR    start a broker with its state in DIR; prints the bootstrap address
#   kafka.sh stop DIR     stop the broker started in DIR (idempotent)
#
# Environment:
#   KAFKA_VERSION          Kafka version from Maven Central (default 3.9.2; 4.x works too)
#   FEDSCHED_CACHE         cache root (default $HOME/.cache/fedsched); jars go to
#                          $FEDSCHED_CACHE/kafka/$KAFKA_VERSION/libs
#   JAVA_HOME              if set, $JAVA_HOME/bin/java is used, else java from PATH
#   MVN                    maven command (default mvn)
#   KAFKA_HEAP             JVM heap options (default -Xmx512m -Xms128m)
#   KAFKA_JVM_OPTS         other broker JVM options (default: C1 compiler only, parallel GC: a
#                          small machine shares its cores with the services, and the parallel young
#                          collections paused the broker ~4x less in total than the serial ones at
#                          200 submissions/s; set G1 and C2 for long runs)
#   KAFKA_START_TIMEOUT    seconds to wait for the broker to come up (default 60)
#   KAFKA_STOP_TIMEOUT     seconds to wait after SIGTERM before SIGKILL (default 30)
#
# DIR layout: server.properties, log4j config, data/ (log.dirs), kafka.log (broker log),
# kafka.out (JVM stdout/stderr), pid (process id = process group id), bootstrap (host:port).
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-3.9.2}"
FEDSCHED_CACHE="${FEDSCHED_CACHE:-${HOME:?HOME is not set}/.cache/fedsched}"
KAFKA_HOME_DIR="$FEDSCHED_CACHE/kafka/$KAFKA_VERSION"
LIBS="$KAFKA_HOME_DIR/libs"
MARKER="$LIBS/.complete"
MVN="${MVN:-mvn}"
KAFKA_HEAP="${KAFKA_HEAP:--Xmx512m -Xms128m}"
KAFKA_JVM_OPTS="${KAFKA_JVM_OPTS:--XX:TieredStopAtLevel=1 -XX:+UseParallelGC}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-60}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"

# Short-lived tool JVMs (StorageTool) start about twice as fast with the C1 compiler only.
TOOL_JVM_OPTS=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xmx256m)

log() { echo "kafka.sh: $*" >&2; }
die() { log "$*"; exit 1; }

java_cmd() {
    if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
        echo "$JAVA_HOME/bin/java"
    elif command -v java >/dev/null 2>&1; then
        command -v java
    else
        die "java not found (set JAVA_HOME or put java on PATH)"
    fi
}

major_version() { echo "${KAFKA_VERSION%%.*}"; }

# ---------------------------------------------------------------------------------------------
# fetch

write_pom() {  # write_pom FILE [extra dependency XML]
    cat >"$1" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.fedsched</groupId>
  <artifactId>kafka-libs</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
${2:-}
  </dependencies>
</project>
EOF
}

dep_xml() {  # dep_xml GROUP ARTIFACT VERSION
    printf '    <dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version></dependency>\n' "$1" "$2" "$3"
}

jar_version() {  # jar_version DIR ARTIFACT -> version of DIR/ARTIFACT-<version>.jar, or empty
    local f
    for f in "$1/$2"-[0-9]*.jar; do
        [[ -e "$f" ]] || continue
        f="${f##*/}"
        f="${f#"$2"-}"
        echo "${f%.jar}"
        return 0
    done
    echo ""
}

mvn_copy() {  # mvn_copy WORKDIR OUTSUBDIR: copy the runtime closure of WORKDIR/pom.xml
    if ! (cd "$1" && "$MVN" -q -B dependency:copy-dependencies -DincludeScope=runtime \
            -DoutputDirectory="$1/$2") >"$1/mvn.log" 2>&1; then
        sed 's/\x1b\[[0-9;]*m//g' "$1/mvn.log" >&2
        return 1
    fi
}

do_fetch_locked() {
    [[ -f "$MARKER" ]] && return 0
    command -v "$MVN" >/dev/null 2>&1 || die "maven ($MVN) not found"
    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/fedsched-kafka-fetch.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$work'" EXIT
    log "fetching Apache Kafka $KAFKA_VERSION from Maven Central into $LIBS"

    # Pass 1: the broker and its runtime dependencies, to learn which slf4j/log4j it brings.
    write_pom "$work/pom.xml"
    mvn_copy "$work" probe || die "maven could not resolve kafka_2.13:$KAFKA_VERSION"

    # Pass 2: add the logging backend the POM leaves out, matching what pass 1 found.
    local slf4j log4j extra=""
    slf4j="$(jar_version "$work/probe" slf4j-api)"
    log4j="$(jar_version "$work/probe" log4j-core)"
    if [[ -n "$log4j" || "$(major_version)" -ge 4 ]]; then
        # Kafka 4.x: log4j2, as the binary distribution ships it. Newer POMs bring log4j-core;
        # 4.0.x does not, so add it at the version Kafka 4.0 was built with. Bind slf4j to it.
        if [[ -z "$log4j" ]]; then
            log4j="${LOG4J2_VERSION:-2.24.3}"
            extra+="$(dep_xml org.apache.logging.log4j log4j-api "$log4j")"$'\n'
            extra+="$(dep_xml org.apache.logging.log4j log4j-core "$log4j")"$'\n'
        fi
        if [[ "$slf4j" == 1.* ]]; then
            extra+="$(dep_xml org.apache.logging.log4j log4j-slf4j-impl "$log4j")"$'\n'
        else
            extra+="$(dep_xml org.apache.logging.log4j log4j-slf4j2-impl "$log4j")"$'\n'
        fi
    else
        # Kafka 3.x: reload4j (log4j 1.2 API), as the binary distribution ships it. slf4j-reload4j
        # is released in lockstep with slf4j-api, so take the same version.
        [[ -n "$slf4j" ]] || slf4j=1.7.36
        extra+="$(dep_xml org.slf4j slf4j-reload4j "$slf4j")"$'\n'
        extra+="$(dep_xml ch.qos.reload4j reload4j 1.2.25)"$'\n'
    fi
    write_pom "$work/pom.xml" "$extra"
    mvn_copy "$work" libs || die "maven could not resolve the logging backend"

    # Sanity check: the main classes must be there.
    local j
    j="$(java_cmd)"
    "$j" "${TOOL_JVM_OPTS[@]}" -cp "$work/libs/*" kafka.tools.StorageTool random-uuid >/dev/null 2>"$work/check.err" \
        || { cat "$work/check.err" >&2; die "fetched jars do not run kafka.tools.StorageTool"; }

    {
        echo "kafka_version=$KAFKA_VERSION"
        echo "slf4j_api=$slf4j"
        if [[ -n "$log4j" ]]; then echo "logging=log4j2"; echo "log4j=$log4j"; else echo "logging=reload4j"; fi
    } >"$work/libs/.complete"
    rm -rf "$LIBS"
    mv "$work/libs" "$LIBS"
    log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars"
}

cmd_fetch() {
    mkdir -p "$KAFKA_HOME_DIR"
    [[ -f "$MARKER" ]] && return 0
    if command -v flock >/dev/null 2>&1; then
        # Serialise concurrent fetches of the same version (parallel test runs).
        (
            flock 9
            do_fetch_locked
        ) 9>"$KAFKA_HOME_DIR/.fetch.lock"
    else
        (do_fetch_locked)
    fi
    [[ -f "$MARKER" ]] || die "fetch did not complete"
}

# ---------------------------------------------------------------------------------------------
# start / stop

free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
    else
        local p _
        for _ in $(seq 1 200); do
            p=$((20000 + RANDOM % 30000))
            if ! port_open "$p"; then echo "$p"; return 0; fi
        done
        die "no free port found"
    fi
}

port_open() {  # true if something accepts connections on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

port_free() {  # true if 127.0.0.1:$1 can be bound
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try: s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError: sys.exit(1)' "$1"
    elif port_open "$1"; then
        return 1
    fi
}

prop() {  # prop FILE KEY -> value or empty
    [[ -f "$1" ]] || { echo ""; return 0; }
    sed -n "s/^$2=//p" "$1" | tail -n 1
}

alive() {  # true if pid $1 runs; a zombie (killed, not yet reaped) counts as gone
    kill -0 "$1" 2>/dev/null || return 1
    if [[ -r "/proc/$1/stat" ]]; then
        local stat
        stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
        stat="${stat##*) }"
        [[ "${stat%% *}" != Z ]]
    fi
}

# pid of the broker started in $1 if it is still running, else empty
running_pid() {
    local dir="$1" pid
    [[ -f "$dir/pid" ]] || { echo ""; return 0; }
    pid="$(cat "$dir/pid" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || { echo ""; return 0; }
    if alive "$pid"; then
        # Guard against pid reuse: the process must be our broker.
        if [[ -r "/proc/$pid/cmdline" ]] && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "kafka.Kafka $dir/server.properties"; then
            echo ""
            return 0
        fi
        echo "$pid"
    else
        echo ""
    fi
}

write_config() {  # write_config DIR PORT CPORT
    local dir="$1" port="$2" cport="$3" major
    major="$(major_version)"
    cat >"$dir/server.properties" <<EOF
# Generated by kafka.sh: single-node KRaft test broker (Kafka $KAFKA_VERSION).
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data

# Single node: every internal topic with replication factor 1 and one partition.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1

# Fast groups and transactions for tests.
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=500
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
transaction.remove.expired.transaction.cleanup.interval.ms=10000
transaction.max.timeout.ms=900000
producer.purgatory.purge.interval.requests=100

# Fast startup and small footprint.
broker.heartbeat.interval.ms=500
# A broker killed with SIGKILL is re-admitted after this, so quick restarts stay quick.
broker.session.timeout.ms=3000
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
log.segment.bytes=67108864
offsets.topic.segment.bytes=16777216
transaction.state.log.segment.bytes=16777216
log.retention.check.interval.ms=300000
delete.topic.enable=true
EOF
    if [[ "$major" -ge 4 ]]; then
        cat >>"$dir/server.properties" <<EOF

# Kafka 4.x: share groups keep state in an internal topic too.
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
EOF
    fi

    # Logging: reload4j (3.x) reads log4j.properties, log4j2 (4.x) reads log4j2.properties.
    cat >"$dir/log4j.properties" <<EOF
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$dir/kafka.log
log4j.appender.file.Append=true
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.authorizer.logger=WARN
EOF
    cat >"$dir/log4j2.properties" <<EOF
status = warn
name = fedsched-kafka
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/kafka.log
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
EOF
}

fail_start() {  # fail_start DIR MESSAGE
    local dir="$1"
    log "$2"
    if [[ -s "$dir/kafka.out" ]]; then
        log "--- tail of $dir/kafka.out"
        tail -n 30 "$dir/kafka.out" >&2 || true
    fi
    if [[ -f "$dir/kafka.log" ]]; then
        log "--- tail of $dir/kafka.log"
        tail -n 60 "$dir/kafka.log" >&2 || true
    fi
}

# One attempt to launch the broker; returns 0 when up, 2 on a port clash, 1 otherwise.
launch() {  # launch DIR PORT CPORT
    local dir="$1" port="$2" cport="$3" j pid deadline heap jvm
    j="$(java_cmd)"
    read -r -a heap <<<"$KAFKA_HEAP"
    read -r -a jvm <<<"$KAFKA_JVM_OPTS"
    write_config "$dir" "$port" "$cport"
    # Keep the previous run's log for post-mortems; the readiness check reads only this run's.
    [[ -f "$dir/kafka.log" ]] && mv -f "$dir/kafka.log" "$dir/kafka.log.prev"

    if [[ ! -f "$dir/data/meta.properties" ]]; then
        local cluster_id
        cluster_id="$("$j" "${TOOL_JVM_OPTS[@]}" -Dlog4j.configuration="file:$dir/log4j.properties" \
            -Dlog4j2.configurationFile="file:$dir/log4j2.properties" \
            -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>>"$dir/kafka.out" | tail -n 1)"
        [[ -n "$cluster_id" ]] || { fail_start "$dir" "StorageTool random-uuid failed"; return 1; }
        "$j" "${TOOL_JVM_OPTS[@]}" -Dlog4j.configuration="file:$dir/log4j.properties" \
            -Dlog4j2.configurationFile="file:$dir/log4j2.properties" \
            -cp "$LIBS/*" kafka.tools.StorageTool format -t "$cluster_id" -c "$dir/server.properties" \
            >>"$dir/kafka.out" 2>&1 || { fail_start "$dir" "StorageTool format failed"; return 1; }
    fi

    rm -f "$dir/pid" "$dir/bootstrap"
    # setsid: the broker leads its own session and process group (pgid == pid), detached from the
    # caller's terminal and with no inherited stdio, so callers that capture our output do not hang.
    # shellcheck disable=SC2016
    setsid bash -c 'echo $$ >"$1/pid.tmp"; mv "$1/pid.tmp" "$1/pid"; shift; exec "$@"' _ "$dir" \
        "$j" "${heap[@]}" "${jvm[@]}" -Djava.awt.headless=true \
        -Dlog4j.configuration="file:$dir/log4j.properties" \
        -Dlog4j2.configurationFile="file:$dir/log4j2.properties" \
        -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
        </dev/null >>"$dir/kafka.out" 2>&1 &
    disown $! 2>/dev/null || true

    deadline=$((SECONDS + KAFKA_START_TIMEOUT))
    while [[ ! -s "$dir/pid" ]]; do
        ((SECONDS < deadline)) || { fail_start "$dir" "broker process did not start"; return 1; }
        sleep 0.05
    done
    pid="$(cat "$dir/pid")"
    while ((SECONDS < deadline)); do
        if ! alive "$pid"; then
            if grep -qE 'BindException|Address already in use' "$dir/kafka.log" "$dir/kafka.out" 2>/dev/null; then
                return 2
            fi
            fail_start "$dir" "broker exited during startup"
            return 1
        fi
        if grep -q 'Kafka Server started' "$dir/kafka.log" 2>/dev/null && port_open "$port"; then
            echo "127.0.0.1:$port" >"$dir/bootstrap"
            return 0
        fi
        sleep 0.2
    done
    fail_start "$dir" "broker did not come up within ${KAFKA_START_TIMEOUT}s"
    stop_pid "$dir" "$pid"
    return 1
}

cmd_start() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: kafka.sh start DIR"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd -P)"

    local pid
    pid="$(running_pid "$dir")"
    if [[ -n "$pid" ]]; then
        [[ -s "$dir/bootstrap" ]] || die "a broker (pid $pid) is starting in $dir; wait or stop it first"
        cat "$dir/bootstrap"  # already running
        return 0
    fi

    [[ -f "$MARKER" ]] || cmd_fetch
    if [[ -f "$dir/data/meta.properties" && -f "$dir/.kafka_version" && "$(cat "$dir/.kafka_version")" != "$KAFKA_VERSION" ]]; then
        die "$dir holds data of Kafka $(cat "$dir/.kafka_version"), not $KAFKA_VERSION"
    fi
    echo "$KAFKA_VERSION" >"$dir/.kafka_version"

    # A restart on an existing DIR keeps its ports, so clients keep their bootstrap address.
    local port cport attempt rc
    port="$(prop "$dir/server.properties" advertised.listeners)"
    port="${port##*:}"
    cport="$(prop "$dir/server.properties" controller.quorum.voters)"
    cport="${cport##*:}"
    for attempt in 1 2 3 4 5; do
        if [[ ! "$port" =~ ^[0-9]+$ || ! "$cport" =~ ^[0-9]+$ ]] || ! port_free "$port" || ! port_free "$cport"; then
            [[ "$attempt" == 1 && "$port" =~ ^[0-9]+$ ]] && log "ports of the previous run are taken; picking new ones"
            port="$(free_port)"
            cport="$(free_port)"
            while [[ "$cport" == "$port" ]]; do cport="$(free_port)"; done
        fi
        rc=0
        launch "$dir" "$port" "$cport" || rc=$?
        case "$rc" in
            0) cat "$dir/bootstrap"; return 0 ;;
            2) log "port clash on attempt $attempt, retrying with other ports"; port=""; cport="" ;;
            *) exit 1 ;;
        esac
    done
    die "could not bind free ports after 5 attempts"
}

stop_pid() {  # stop_pid DIR PID: TERM the process group, wait, then KILL
    local dir="$1" pid="$2" deadline
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
    while alive "$pid" && ((SECONDS < deadline)); do
        sleep 0.1
    done
    if alive "$pid"; then
        log "broker $pid did not stop within ${KAFKA_STOP_TIMEOUT}s, killing it"
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
        deadline=$((SECONDS + 10))
        while alive "$pid" && ((SECONDS < deadline)); do sleep 0.05; done
    fi
}

cmd_stop() {
    local dir="${1:-}"
    [[ -n "$dir" ]] || die "usage: kafka.sh stop DIR"
    [[ -d "$dir" ]] || return 0
    dir="$(cd "$dir" && pwd -P)"
    local pid
    pid="$(running_pid "$dir")"
    if [[ -n "$pid" ]]; then
        stop_pid "$dir" "$pid"
    fi
    rm -f "$dir/pid" "$dir/bootstrap"
}

case "${1:-}" in
    fetch) cmd_fetch ;;
    start) shift; cmd_start "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    *)
        echo "usage: kafka.sh fetch | start DIR | stop DIR   (env KAFKA_VERSION, default 3.9.2)" >&2
        exit 2
        ;;
esac
