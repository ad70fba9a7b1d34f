#!/usr/bin/env bash
# The machine's PostgreSQL for the tests (`make postgres`; .ci/run calls it first): Debian's
# postgresql-15, cluster 15/main on 127.0.0.1:5432 and its socket, trust auth for both,
# databases test, root and postgres. Installs and starts what is missing, leaves a running
# one alone, prints one line. The suite's own clusters (standbys, poolers) use other ports.
set -euo pipefail

ready() {
    pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null \
        && [ "$(psql -w -h 127.0.0.1 -p 5432 -U postgres -Atqc \
            "SELECT count(*) FROM pg_database WHERE datname IN ('test', 'root', 'postgres')" 2>/dev/null)" = 3 ]
}

if ready; then
    echo "postgres: PostgreSQL answers on 127.0.0.1:5432 (databases test, root, postgres)"
    exit 0
fi

if [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 postgresql-client-15 >/dev/null
fi
if ! pg_lsclusters -h | awk '$1 == 15 && $2 == "main" { found = 1 } END { exit !found }'; then
    pg_createcluster 15 main -p 5432 >/dev/null
fi

etc=/etc/postgresql/15/main
# Trust on the socket and on loopback only: a test machine's cluster, never a production one.
printf '%s\n' \
    'local all all trust' 'host all all 127.0.0.1/32 trust' 'host all all ::1/128 trust' \
    'local replication all trust' 'host replication all 127.0.0.1/32 trust' > "$etc/pg_hba.conf"
sed -i -E "s/^#?listen_addresses\s*=.*/listen_addresses = '127.0.0.1'/; s/^#?port\s*=.*/port = 5432/" \
    "$etc/postgresql.conf"
# A package's post-install may have started it with the old settings: restart reads the new ones.
pg_ctlcluster --skip-systemctl-redirect 15 main restart 2>/dev/null \
    || pg_ctlcluster --skip-systemctl-redirect 15 main start

for _ in $(seq 120); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.5; done
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    echo "postgres: PostgreSQL 15 did not start; see /var/log/postgresql/postgresql-15-main.log" >&2
    exit 1
fi
for db in test root; do
    [ "$(psql -h 127.0.0.1 -U postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = '$db'")" = 1 ] \
        || createdb -h 127.0.0.1 -U postgres "$db"
done
ready || { echo "postgres: started, but the databases test, root, postgres are not all there" >&2; exit 1; }
echo "postgres: PostgreSQL 15 serving on 127.0.0.1:5432 (trust; databases test, root, postgres)"
