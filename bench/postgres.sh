# Sourced by the cluster benchmarks: a throwaway PostgreSQL from Debian's
# packages in WORK/pg, on a free loopback port, trusting local logins.
#   start_postgres    initdb and start it; sets PG_URL (postgres://…:PORT,
#                     add /DATABASE) and STORE (its postgres database)
#   create_database NAME
#   stop_postgres     stop it at once (call from the script's cleanup)
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start_postgres() {
  chmod 755 "$WORK"
  mkdir -p "$WORK/pg"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$WORK/pg"
  PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  as_pg "$PGBIN/initdb" -D "$WORK/pg/data" -U hearth --auth=trust -E UTF8 --no-sync >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w \
    -o "-p $PGPORT -k $WORK/pg -c listen_addresses=127.0.0.1" start >/dev/null
  PG_URL="postgres://hearth@127.0.0.1:$PGPORT"
  STORE="$PG_URL/postgres"
}

create_database() {
  as_pg "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U hearth -d postgres -qc "CREATE DATABASE \"$1\"" >/dev/null
}

stop_postgres() {
  [ -d "$WORK/pg/data" ] || return 0
  as_pg "$PGBIN/pg_ctl" -D "$WORK/pg/data" -m immediate stop >/dev/null 2>&1 || true
}
