#!/bin/sh
# Entrypoint of codecage-e2e-postgres (scripts/build-image.sh --postgres):
# Debian's PostgreSQL 15, initialised on first start, in the foreground.
#   POSTGRES_USER      superuser (default postgres)
#   POSTGRES_PASSWORD  its password; without one, every connection is trusted
#   POSTGRES_DB        a database to create (default: the user's name)
#   PGDATA             data directory (default /var/lib/postgresql/data)
# Arguments are passed to postgres (e.g. -c fsync=off).
set -eu
bin=/usr/lib/postgresql/15/bin
: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	auth=trust
	pwfile=""
	if [ -n "${POSTGRES_PASSWORD:-}" ]; then
		auth=scram-sha-256
		pwfile="$(mktemp)"
		printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
		chown postgres "$pwfile"
	fi
	as_postgres "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" -E UTF8 --locale=C.UTF-8 \
		--auth-local=trust --auth-host="$auth" ${pwfile:+--pwfile="$pwfile"} >/dev/null
	[ -z "$pwfile" ] || rm -f "$pwfile"
	printf 'host all all 0.0.0.0/0 %s\nhost all all ::/0 %s\n' "$auth" "$auth" >>"$PGDATA/pg_hba.conf"
	if [ "$POSTGRES_DB" != postgres ]; then
		echo "CREATE DATABASE \"$POSTGRES_DB\";" | as_postgres "$bin/postgres" --single -j -D "$PGDATA" postgres >/dev/null
	fi
	echo "postgres-entrypoint: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB, auth $auth)"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$PGDATA" \
	-c listen_addresses='*' -c port=5432 -c unix_socket_directories=/run/postgresql "$@"
