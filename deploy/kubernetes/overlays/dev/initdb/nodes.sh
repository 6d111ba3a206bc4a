#!/bin/sh
# Run by the postgres image once, when it makes the database: the role
# nodes connect as (their Secret's URL names it). It may log in and
# nothing more; a gateway started with --store-node-role hearth_node grants
# it a node's share of the tables after migrating them.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v password="$HEARTH_NODE_PASSWORD" <<'SQL'
CREATE ROLE hearth_node LOGIN PASSWORD :'password';
SQL
