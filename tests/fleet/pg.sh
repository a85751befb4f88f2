#!/bin/sh
# A throwaway PostgreSQL server for the fleet tests and benchmark.
#   pg.sh start DIR   initdb into DIR/data when it is not there yet, start the server listening
#                     only on a Unix socket in DIR (no TCP port), print its libpq connection
#                     string on stdout
#   pg.sh stop DIR    stop it (fast shutdown); DIR stays, so start serves the same data again
# As root (CI) the server runs as the unprivileged user the postgresql package creates
# (postgres), which gets DIR; otherwise as the caller. Exits 77 when the server binaries
# (Debian's postgresql, scripts/deps.sh) are missing.
set -eu
[ $# -eq 2 ] || { echo "usage: pg.sh start|stop DIR" >&2; exit 2; }
cmd=$1
dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ] || [ ! -x "$bin/pg_ctl" ]; then
  echo "pg.sh: no PostgreSQL server under /usr/lib/postgresql/*/bin (scripts/deps.sh installs postgresql)" >&2
  exit 77
fi
user=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
  user=postgres
  as() { runuser -u postgres -- "$@"; }
else
  as() { "$@"; }
fi
case $cmd in
start)
  mkdir -p "$dir"
  [ "$(id -u)" -ne 0 ] || chown postgres "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    as "$bin/initdb" -D "$dir/data" -U "$user" --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses='' -c unix_socket_directories='$dir' -c fsync=off -c full_page_writes=off" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  echo "host=$dir port=5432 dbname=postgres user=$user"
  ;;
stop)
  [ ! -f "$dir/data/postmaster.pid" ] || as "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
  ;;
*)
  echo "usage: pg.sh start|stop DIR" >&2
  exit 2
  ;;
esac
