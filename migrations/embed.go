// Package migrations holds skiplock's versioned SQL migrations.
//
// Files are named NNN_name.up.sql and NNN_name.down.sql. They create objects without a
// schema prefix: skiplock.Migrate runs them with search_path set to the target schema,
// then pg_temp ("SET LOCAL search_path TO myschema, pg_temp"); the functions of migration
// 11 keep that path (SET search_path FROM CURRENT), so a tool of your own must set it so.
// Most users never touch this package; it is exported so that a project with its own
// migration tool can copy the SQL.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
