"""Enqueue skiplock jobs from Python with psycopg 3, through the SQL function
<schema>.enqueue (docs/sql-enqueue.md).

    DATABASE_URL=postgres://... SKIPLOCK_SCHEMA=skiplock python3 enqueue.py

It enqueues a job inside a transaction with a business write (here a plain SELECT
stands for it), enqueues the same unique key again (a duplicate, not an error), rolls
back a third enqueue, and shows a refused input. The last line it prints is a JSON
summary that examples/sql-enqueue's Go test checks, while a Go worker runs the job.
"""

import json
import os
import sys

try:
    import psycopg
    from psycopg import sql
    from psycopg.types.json import Jsonb
except ImportError:
    sys.exit(
        "enqueue.py needs psycopg 3: apt-get install python3-psycopg "
        "(Debian, Ubuntu), or pip install 'psycopg[binary]'"
    )


def enqueue(conn, schema, kind, args, **options):
    """Calls <schema>.enqueue with options as named arguments; returns (id, duplicate)."""
    named = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Placeholder()) for k in options]
    query = sql.SQL("SELECT id, duplicate FROM {}.enqueue({})").format(
        sql.Identifier(schema),
        sql.SQL(", ").join([sql.Placeholder(), sql.Placeholder(), *named]),
    )
    return conn.execute(query, (kind, Jsonb(args), *options.values())).fetchone()


def main():
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    schema = os.environ.get("SKIPLOCK_SCHEMA", "skiplock")
    summary = {}
    with psycopg.connect(url) as conn:
        version = conn.execute(
            sql.SQL("SELECT {}.enqueue_version()").format(sql.Identifier(schema))
        ).fetchone()[0]
        if version < 1:
            sys.exit(f"schema {schema} has enqueue contract version {version}, this program needs 1")

        # The job and the business write commit together, or neither does.
        with conn.transaction():
            conn.execute("SELECT 1")  # your INSERT INTO orders ... goes here
            job_id, duplicate = enqueue(
                conn, schema, "send_email", {"order_id": 42, "to": "py@example.com"},
                queue="email", unique_key="order-42", metadata=Jsonb({"from": "python"}),
            )
        summary["id"], summary["duplicate"] = job_id, duplicate

        # The same key again: the job that holds it, and duplicate is true.
        with conn.transaction():
            again, duplicate = enqueue(conn, schema, "send_email", {"order_id": 42}, queue="email", unique_key="order-42")
        summary["again"], summary["again_duplicate"] = again, duplicate

        # Rolled back: no job.
        with conn.transaction() as tx:
            summary["rolled_back"], _ = enqueue(conn, schema, "send_email", {"order_id": 0}, queue="email")
            raise psycopg.Rollback(tx)

        # Refused input: an error naming the argument, and nothing written.
        try:
            with conn.transaction():
                enqueue(conn, schema, "send_email", {}, queue="Not A Queue")
        except psycopg.errors.InvalidParameterValue as e:
            summary["refused"] = {"sqlstate": e.sqlstate, "column": e.diag.column_name}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
