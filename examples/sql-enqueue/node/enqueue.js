// Enqueue skiplock jobs from Node with node-postgres (pg), through the SQL function
// <schema>.enqueue (docs/sql-enqueue.md).
//
//   npm ci && DATABASE_URL=postgres://... SKIPLOCK_SCHEMA=skiplock node enqueue.js
//
// It enqueues a job inside a transaction with a business write (a plain SELECT stands
// for it), enqueues the same unique key again (a duplicate, not an error), rolls back a
// third enqueue, and shows a refused input. The last line it prints is a JSON summary
// that examples/sql-enqueue's Go test checks, while a Go worker runs the job.
'use strict';

let pg;
try {
  pg = require('pg');
} catch (e) {
  console.error("enqueue.js needs node-postgres: run `npm ci` (or `npm install pg`) in this directory");
  process.exit(1);
}

// enqueue calls <schema>.enqueue with options as named arguments; pg returns the bigint
// id as a string. It resolves to { id, duplicate }.
async function enqueue(client, schema, kind, args, options = {}) {
  const names = Object.keys(options);
  const named = names.map((n, i) => `${client.escapeIdentifier(n)} => $${i + 3}`);
  const sql = `SELECT id, duplicate FROM ${client.escapeIdentifier(schema)}.enqueue(${['$1', '$2', ...named].join(', ')})`;
  const { rows } = await client.query(sql, [kind, JSON.stringify(args), ...names.map((n) => options[n])]);
  return rows[0];
}

async function main() {
  const url = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
  const schema = process.env.SKIPLOCK_SCHEMA || 'skiplock';
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const summary = {};
  try {
    const { rows } = await client.query(`SELECT ${client.escapeIdentifier(schema)}.enqueue_version() AS v`);
    if (rows[0].v < 1) throw new Error(`schema ${schema} has enqueue contract version ${rows[0].v}, this program needs 1`);

    // The job and the business write commit together, or neither does.
    await client.query('BEGIN');
    await client.query('SELECT 1'); // your INSERT INTO orders ... goes here
    const job = await enqueue(client, schema, 'send_email', { order_id: 43, to: 'js@example.com' },
      { queue: 'email', unique_key: 'order-43', metadata: JSON.stringify({ from: 'node' }) });
    await client.query('COMMIT');
    summary.id = Number(job.id);
    summary.duplicate = job.duplicate;

    // The same key again: the job that holds it, and duplicate is true.
    const again = await enqueue(client, schema, 'send_email', { order_id: 43 }, { queue: 'email', unique_key: 'order-43' });
    summary.again = Number(again.id);
    summary.again_duplicate = again.duplicate;

    // Rolled back: no job.
    await client.query('BEGIN');
    summary.rolled_back = Number((await enqueue(client, schema, 'send_email', { order_id: 0 }, { queue: 'email' })).id);
    await client.query('ROLLBACK');

    // Refused input: an error naming the argument, and nothing written.
    try {
      await enqueue(client, schema, 'send_email', {}, { queue: 'Not A Queue' });
    } catch (err) {
      if (err.code !== '22023') throw err;
      summary.refused = { sqlstate: err.code, column: err.column };
    }
  } finally {
    await client.end();
  }
  console.log(JSON.stringify(summary));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
