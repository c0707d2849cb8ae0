#!/usr/bin/env bash
# Start the loopback services the connector tests talk to, each only if it is not running,
# with the commands of this machine kind's notes (python-svc). Says clearly which one it could
# not start; the tests of a service that is down then fail, naming it.
set -u

listening() { (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {  # name port command...
    local name=$1 port=$2
    shift 2
    if listening "$port"; then
        echo "services: $name is running on 127.0.0.1:$port"
        return 0
    fi
    echo "services: starting $name: $*"
    bash -c "$*" >/dev/null 2>&1
    for _ in $(seq 1 60); do
        if listening "$port"; then
            echo "services: $name started on 127.0.0.1:$port"
            return 0
        fi
        sleep 0.5
    done
    echo "services: COULD NOT START $name on 127.0.0.1:$port (its connector tests will fail)" >&2
    return 1
}

failed=0
start PostgreSQL 5432 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start' || failed=1
start Redis 6379 'redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log' || failed=1
start NATS 4222 'start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log' || failed=1
start Mosquitto 1883 'mosquitto -d -c /etc/mosquitto/mosquitto.conf' || failed=1
exit $failed
