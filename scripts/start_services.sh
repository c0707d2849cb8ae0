#!/usr/bin/env bash
# Install (from Debian's packages) and start the loopback services the connector tests talk
# to, each only if it is not already running:
#
#   PostgreSQL  127.0.0.1:5432  trust auth for 127.0.0.1, a database called "test"
#   Redis       127.0.0.1:6379  no persistence
#   NATS        127.0.0.1:4222  JetStream on, its store under $STATE
#   Mosquitto   127.0.0.1:1883
#   Kafka       127.0.0.1:9092  a single-node KRaft broker from Apache Kafka's jars, resolved
#                               from Maven Central with scripts/kafka/pom.xml (cached in ~/.m2)
#
# Idempotent and fast when everything runs. It says clearly which service it could not start;
# the tests of a service that is down then fail, naming it (they are never skipped).
# SLUICE_SKIP_SERVICES=1 skips all of this (a laptop with services of its own).
set -u
cd "$(dirname "$0")/.."

if [ "${SLUICE_SKIP_SERVICES:-0}" = "1" ]; then
    echo "services: SLUICE_SKIP_SERVICES=1: not installing or starting any"
    exit 0
fi

STATE=${SLUICE_SERVICES_DIR:-/var/tmp/sluice-services}
KAFKA_VERSION=4.1.1
mkdir -p "$STATE"

listening() { (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {  # name port command...
    local name=$1 port=$2
    shift 2
    if listening "$port"; then
        echo "services: $name is running on 127.0.0.1:$port"
        return 0
    fi
    echo "services: starting $name"
    bash -c "$*" >>"$STATE/start.log" 2>&1
    for _ in $(seq 1 120); do
        if listening "$port"; then
            echo "services: $name started on 127.0.0.1:$port"
            return 0
        fi
        sleep 0.5
    done
    echo "services: COULD NOT START $name on 127.0.0.1:$port (its connector tests will fail; see $STATE/start.log)" >&2
    return 1
}

# --- packages --------------------------------------------------------------------------------

install_missing() {
    local missing=()
    command -v pg_ctlcluster >/dev/null 2>&1 || missing+=(postgresql)
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    [ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
    command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
    command -v mvn >/dev/null 2>&1 || missing+=(maven)
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "services: missing ${missing[*]} and this is not root with apt-get: install them yourself" >&2
        return 1
    fi
    echo "services: installing ${missing[*]} (apt-get)"
    apt-get update -q >>"$STATE/apt.log" 2>&1
    # the packages' own start scripts need no init system here: policy-rc.d stops them trying
    DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q "${missing[@]}" >>"$STATE/apt.log" 2>&1 \
        || { echo "services: apt-get install failed (see $STATE/apt.log)" >&2; return 1; }
}

# --- PostgreSQL: trust on loopback and a "test" database ----------------------------------------

postgres_configure() {
    local version conf_dir
    version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
    [ -n "$version" ] || { echo "services: no PostgreSQL cluster under /etc/postgresql" >&2; return 1; }
    conf_dir=/etc/postgresql/$version/main
    if ! grep -q '^# sluice-tests' "$conf_dir/pg_hba.conf"; then
        # first match wins: trust for loopback TCP goes above the packaged rules
        { echo "# sluice-tests: trust on loopback for the connector tests"
          echo "host all all 127.0.0.1/32 trust"
          echo "host all all ::1/128 trust"
          cat "$conf_dir/pg_hba.conf"; } > "$conf_dir/pg_hba.conf.new"
        mv "$conf_dir/pg_hba.conf.new" "$conf_dir/pg_hba.conf"
        chown postgres:postgres "$conf_dir/pg_hba.conf"
        # a running server reloads its rules
        pg_ctlcluster --skip-systemctl-redirect "$version" main reload >/dev/null 2>&1 || true
    fi
    echo "pg_ctlcluster --skip-systemctl-redirect $version main start"
}

postgres_database() {
    psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" 2>/dev/null | grep -q 1 \
        || psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE test" >/dev/null 2>&1 \
        || { echo "services: could not create PostgreSQL database 'test'" >&2; return 1; }
}

# --- Kafka: jars from Maven Central, a formatted KRaft log directory, java -cp -----------------

kafka_libs() {
    local libs="$STATE/kafka-$KAFKA_VERSION/libs"
    if [ ! -f "$libs/kafka_2.13-$KAFKA_VERSION.jar" ]; then
        echo "services: resolving Apache Kafka $KAFKA_VERSION's jars from Maven Central (mvn)" >&2
        mvn -q -B -f scripts/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory="$libs" \
            >>"$STATE/mvn.log" 2>&1 || { echo "services: mvn could not resolve Kafka (see $STATE/mvn.log)" >&2; return 1; }
    fi
    echo "$libs"
}

kafka_command() {
    local libs data conf
    libs=$(kafka_libs) || return 1
    data="$STATE/kafka-data"
    conf="$STATE/kafka-server.properties"
    { cat scripts/kafka/server.properties; echo "log.dirs=$data"; } > "$conf"
    if [ ! -f "$data/meta.properties" ]; then
        rm -rf "$data"
        java -cp "$libs/*" -Dlog4j2.configurationFile="$PWD/scripts/kafka/log4j2.yaml" kafka.tools.StorageTool \
            format -t "$(java -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)" -c "$conf" \
            >>"$STATE/start.log" 2>&1 || { echo "services: kafka-storage format failed" >&2; return 1; }
    fi
    echo "nohup java -Xms256m -Xmx768m -XX:TieredStopAtLevel=1 -cp '$libs/*' \
-Dlog4j2.configurationFile='$PWD/scripts/kafka/log4j2.yaml' kafka.Kafka '$conf' >'$STATE/kafka.log' 2>&1 &"
}

# --- start ---------------------------------------------------------------------------------------

failed=0
all_up=1
for port in 5432 6379 4222 1883 9092; do listening "$port" || all_up=0; done
if [ "$all_up" = "1" ]; then
    echo "services: PostgreSQL, Redis, NATS, Mosquitto and Kafka are running"
    postgres_database || failed=1
    exit $failed
fi

install_missing || failed=1

if pg_cmd=$(postgres_configure); then
    start PostgreSQL 5432 "$pg_cmd" && postgres_database || failed=1
else
    failed=1
fi
mkdir -p "$STATE/redis" "$STATE/nats"
start Redis 6379 "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no \
--dir '$STATE/redis' --logfile '$STATE/redis.log'" || failed=1
nats_bin=$(command -v nats-server || echo /usr/sbin/nats-server)
start NATS 4222 "nohup $nats_bin -a 127.0.0.1 -p 4222 -js -sd '$STATE/nats' -l '$STATE/nats.log' >/dev/null 2>&1 &" || failed=1
mosquitto_bin=$(command -v mosquitto || echo /usr/sbin/mosquitto)
printf 'listener 1883 127.0.0.1\nallow_anonymous true\npersistence false\n' > "$STATE/mosquitto.conf"
start Mosquitto 1883 "$mosquitto_bin -d -c '$STATE/mosquitto.conf'" || failed=1
if kafka_cmd=$(kafka_command); then
    start Kafka 9092 "$kafka_cmd" || failed=1
else
    failed=1
fi
exit $failed
