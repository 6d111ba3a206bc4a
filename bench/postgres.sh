# Sourced by the cluster benchmarks: a throwaway PostgreSQL from Debian's
# packages in WORK/pg, on a free loopback port, trusting local logins.
#   start_postgres    initdb and start it; sets PG_URL (postgres://…:PORT,
#                     add /DATABASE) and STORE (its postgres database).
#                     With PG_TLS=1 it also serves TLS (plain text too),
#                     with a certificate for localhost from a CA of its
#                     own, WORK/pg/ca.pem
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
  local tls=""
  if [ "${PG_TLS:-0}" = 1 ]; then
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    (cd "$WORK/pg" &&
      openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 2 -subj "/CN=bench CA" 2>/dev/null &&
      openssl req "${ec[@]}" -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null &&
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.crt \
        -days 2 -extfile <(echo subjectAltName=DNS:localhost) 2>/dev/null &&
      chmod 600 server.key)
    [ "$(id -u)" -eq 0 ] && chown postgres: "$WORK/pg/server.key" "$WORK/pg/server.crt"
    tls="-c ssl=on -c ssl_cert_file=$WORK/pg/server.crt -c ssl_key_file=$WORK/pg/server.key"
  fi
  as_pg "$PGBIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/log" -w \
    -o "-p $PGPORT -k $WORK/pg -c listen_addresses=127.0.0.1 $tls" start >/dev/null
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
