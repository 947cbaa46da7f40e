#!/bin/sh
# PostgreSQL roles for clgate (run once, by the server's superuser, when the database is created:
# the postgres image runs it from /docker-entrypoint-initdb.d; elsewhere run it by hand with psql).
#
#   clgate_owner  owns the database, its schema and every table: the migration role (`clgate db upgrade`,
#                 then `clgate db grant clgate_app`). Only the migrate job knows its password.
#   clgate_app    what the API and the workers connect as: SELECT and INSERT on the append-only tables
#                 (decisions, waivers, audit events, job files …), no TRUNCATE, no TRIGGER, owns nothing,
#                 so it can neither rewrite history nor switch off the triggers that refuse it.
#
# Needs POSTGRES_USER, POSTGRES_DB, PG_OWNER_PASSWORD and PG_APP_PASSWORD in the environment.
set -eu
: "${PG_OWNER_PASSWORD:?set PG_OWNER_PASSWORD}"
: "${PG_APP_PASSWORD:?set PG_APP_PASSWORD}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v owner_password="$PG_OWNER_PASSWORD" -v app_password="$PG_APP_PASSWORD" <<'SQL'
CREATE ROLE clgate_owner LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'owner_password';
CREATE ROLE clgate_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD :'app_password';
ALTER DATABASE :"DBNAME" OWNER TO clgate_owner;
ALTER SCHEMA public OWNER TO clgate_owner;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON DATABASE :"DBNAME" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"DBNAME" TO clgate_app;
GRANT USAGE ON SCHEMA public TO clgate_app;
SQL
