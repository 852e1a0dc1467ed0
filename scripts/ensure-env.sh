#!/usr/bin/env bash
# ensure-env.sh: make sure this machine can run skiplock's demo and tests.
#
#   - a Postgres answers at $DATABASE_URL, or else at 127.0.0.1:5432: an installed
#     cluster that is down is started; when none is installed and we may use apt-get,
#     Debian's postgresql is installed, started and set to trust loopback connections;
#   - with --pgbouncer, pgbouncer is installed (the PgBouncer test starts its own);
#   - with --faketime, libfaketime is installed (the clock-step tests run a server under it);
#   - with --chromium, Debian's chromium is installed (the dashboard's browser test drives
#     it), after an apt-get update: a fresh machine's package lists may not name it yet;
#   - with --sql-examples, on a machine with python3, Debian's python3-psycopg is installed
#     unless a python3 already imports psycopg (examples/sql-enqueue's Python example).
#
# It never fails the build by itself: when it cannot provide a server it says so, and the
# test harness falls back to a throwaway initdb cluster (or Docker) or fails with advice.
set -u
want_pgbouncer=0
want_chromium=0
want_sql_examples=0
want_faketime=0
for arg in "$@"; do
	case "$arg" in
	--pgbouncer) want_pgbouncer=1 ;;
	--chromium) want_chromium=1 ;;
	--sql-examples) want_sql_examples=1 ;;
	--faketime) want_faketime=1 ;;
	*) echo "ensure-env: unknown option $arg (use --pgbouncer, --chromium, --sql-examples, --faketime)" >&2 ;;
	esac
done

say() { echo "ensure-env: $*" >&2; }

as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo -n "$@"
	else return 1; fi
}

apt_install() {
	command -v apt-get >/dev/null 2>&1 || { say "no apt-get: install $* yourself"; return 1; }
	say "installing $* with apt-get"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 && return 0
	as_root apt-get update -q >/dev/null 2>&1
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

# answers reports whether something accepts connections on 127.0.0.1:5432 (or $DATABASE_URL).
answers() {
	if command -v pg_isready >/dev/null 2>&1; then
		if [ -n "${DATABASE_URL:-}" ]; then pg_isready -q -t 3 -d "$DATABASE_URL"; else pg_isready -q -t 3 -h 127.0.0.1 -p 5432; fi
		return
	fi
	[ -n "${DATABASE_URL:-}" ] && return 0 # cannot check without the client: trust it
	(exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
}

start_clusters() {
	command -v pg_ctlcluster >/dev/null 2>&1 || return 1
	[ -d /etc/postgresql ] || return 1
	for v in $(ls /etc/postgresql); do
		say "starting Postgres cluster $v/main"
		as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start >/dev/null 2>&1 || true
	done
	for _ in $(seq 1 30); do answers && return 0; sleep 1; done
	return 1
}

# trust_loopback lets the postgres user in over 127.0.0.1 without a password, as the
# tests and the demo expect. Only done on a cluster this script installed.
trust_loopback() {
	for hba in /etc/postgresql/*/main/pg_hba.conf; do
		[ -f "$hba" ] || continue
		grep -q '^host all all 127.0.0.1/32 trust' "$hba" && continue
		as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
	done
	for v in $(ls /etc/postgresql); do as_root pg_ctlcluster --skip-systemctl-redirect "$v" main reload >/dev/null 2>&1 || true; done
}

if answers; then
	:
elif [ -n "${DATABASE_URL:-}" ]; then
	say "DATABASE_URL is set but does not answer; fix it or unset it"
elif start_clusters; then
	:
elif ! [ -d /etc/postgresql ] && apt_install postgresql; then
	start_clusters || true
	trust_loopback
	answers || say "installed Postgres but it does not answer on 127.0.0.1:5432"
else
	say "no Postgres on 127.0.0.1:5432 and none could be started; the tests will try a throwaway initdb cluster"
fi
if answers && [ -z "${DATABASE_URL:-}" ] && command -v psql >/dev/null 2>&1; then
	# The harness prefers a database named test; create it when missing (best effort).
	psql -h 127.0.0.1 -U postgres -d postgres -Atqc "SELECT 1 FROM pg_database WHERE datname = 'test'" 2>/dev/null | grep -q 1 ||
		psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test" >/dev/null 2>&1 || true
fi

if [ "$want_pgbouncer" = 1 ] && ! command -v pgbouncer >/dev/null 2>&1 && ! [ -x /usr/sbin/pgbouncer ]; then
	apt_install pgbouncer || say "could not install pgbouncer: the PgBouncer test will fail (apt-get install -y pgbouncer)"
fi

if [ "$want_faketime" = 1 ] && [ -z "${SKIPLOCK_FAKETIME_LIB:-}" ] && ! ls /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1 >/dev/null 2>&1; then
	apt_install libfaketime || say "could not install libfaketime: the clock-step tests will fail (apt-get install -y libfaketime)"
fi

if [ "$want_chromium" = 1 ] && ! [ -x /usr/bin/chromium ] && ! command -v chromium >/dev/null 2>&1; then
	if command -v apt-get >/dev/null 2>&1 && as_root true; then
		say "installing chromium with apt-get (after apt-get update)"
		as_root apt-get update -q >/dev/null 2>&1
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null ||
			say "could not install chromium: the dashboard's browser test will fail (apt-get update && apt-get install -y chromium)"
	else
		say "no chromium and no apt-get to install it with: the dashboard's browser test will fail; install Chromium or set SKIPLOCK_CHROMIUM to one"
	fi
fi
if [ "$want_sql_examples" = 1 ]; then
	has_psycopg=0
	has_python=0
	for py in python3 /usr/bin/python3; do
		command -v "$py" >/dev/null 2>&1 || continue
		has_python=1
		"$py" -c 'import psycopg' 2>/dev/null && has_psycopg=1
	done
	if [ "$has_python" = 1 ] && [ "$has_psycopg" = 0 ]; then
		apt_install python3-psycopg ||
			say "could not install python3-psycopg: the Python SQL-enqueue example will fail (apt-get install python3-psycopg, or pip install 'psycopg[binary]')"
	fi
fi
exit 0
