package main

// This file holds `skiplock migrate sql`: skiplock's migrations as plain SQL files for a
// migration tool of the user's (goose, golang-migrate, atlas), with the schema written
// into every statement.

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/skiplock/skiplock/migrations"
)

// migrateSQLCommand is `skiplock migrate sql`, which needs no database.
func migrateSQLCommand() *command {
	return &command{
		name:    "migrate sql",
		args:    "[--format plain|golang-migrate|goose|atlas] [--out DIR]",
		summary: "print the migrations as SQL files for your migration tool, the schema written in",
		help: "Prints skiplock's migrations as plain SQL, every object qualified with --schema (quoted;\n" +
			"no search_path), each file ending with the row skiplock records in <schema>.schema_migrations,\n" +
			"so that Migrate, CheckSchema and workers see the versions applied. --format lays them\n" +
			"out for golang-migrate (NNN_skiplock_name.up.sql and .down.sql), goose (one file with\n" +
			"-- +goose Up and Down) or atlas (up files; run `atlas migrate hash`); plain (the default)\n" +
			"prints the up files. --out writes the files to a directory; without it they go to stdout.\n" +
			"Keep them in a directory (and version table) of their own: their numbers are skiplock's.\n" +
			"Needs no database.",
		flags: func(fs *flag.FlagSet, o *options) {
			fs.StringVar(&o.sqlFormat, "format", formatPlain, "`layout`: plain, golang-migrate, goose or atlas")
			fs.StringVar(&o.out, "out", "", "write the files to directory `DIR` instead of printing them")
		},
		check: func(o *options) error {
			if !slices.Contains(sqlFormats, o.sqlFormat) {
				return usagef("migrate sql", "migrate sql: --format %q: use one of %s", o.sqlFormat, strings.Join(sqlFormats, ", "))
			}
			return nil
		},
		run: cmdMigrateSQL,
	}
}

// SQL formats of migrate sql.
const (
	formatPlain         = "plain"
	formatGolangMigrate = "golang-migrate"
	formatGoose         = "goose"
	formatAtlas         = "atlas"
)

var sqlFormats = []string{formatPlain, formatGolangMigrate, formatGoose, formatAtlas}

// schemaNameRE is what skiplock accepts as a schema name (skiplock.ErrInvalidSchema).
var schemaNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,47}$`)

// sqlMigration is one migration with the schema written in.
type sqlMigration struct {
	version  int
	name     string
	up, down string
}

// qualifyRules put the schema before the object each kind of statement in the migration
// files names. The files are written for search_path (Migrate sets it); these rules cover
// every statement form they use, and renderMigrations refuses a statement no rule covers,
// so a new form in a new migration fails the tests rather than printing SQL that would
// land in the wrong schema. Index names are not qualified in CREATE INDEX (Postgres puts
// an index in its table's schema) but are in DROP INDEX.
var qualifyRules = []*regexp.Regexp{
	regexp.MustCompile(`(?im)^([ \t]*CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*CREATE\s+(?:UNIQUE\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?[a-z_][a-z0-9_]*\s+ON\s+(?:ONLY\s+)?)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*ALTER\s+TABLE\s+(?:IF\s+EXISTS\s+)?(?:ONLY\s+)?)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*DROP\s+(?:TABLE|INDEX)\s+(?:IF\s+EXISTS\s+)?)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*INSERT\s+INTO\s+)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*DELETE\s+FROM\s+)([a-z_][a-z0-9_]*)\b`),
	// DELETE FROM t [alias] USING u: the second table, on the same line (the rule above
	// has qualified the first, so \S+ matches it written with the schema).
	regexp.MustCompile(`(?im)^([ \t]*DELETE\s+FROM\s+\S+\s+(?:[a-z_][a-z0-9_]*\s+)?USING\s+)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*COMMENT\s+ON\s+(?:TABLE|INDEX|FUNCTION)\s+)([a-z_][a-z0-9_]*)\b`),
	// A trigger lives in its table's schema (its name is not qualified); the table it is
	// on and the function it runs are (migration 13).
	regexp.MustCompile(`(?im)^([ \t]*CREATE\s+TRIGGER\s+[a-z_][a-z0-9_]*\s+(?:AFTER|BEFORE)\s+[^\n]*?\bON\s+)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?[a-z_][a-z0-9_]*\s+ON\s+)([a-z_][a-z0-9_]*)\b`),
	regexp.MustCompile(`(?im)^([ \t]*EXECUTE\s+FUNCTION\s+)([a-z_][a-z0-9_]*)\b`),
}

// fromCurrentRE finds the search_path a function keeps from the session that creates it
// (migration 11): Migrate's, the schema then pg_temp, which these files write in.
var fromCurrentRE = regexp.MustCompile(`(?im)^([ \t]*SET\s+search_path\s+)FROM\s+CURRENT\b`)

// dollarQuoteRE finds the opening tag of a dollar-quoted string: a function's body.
var dollarQuoteRE = regexp.MustCompile(`\$[A-Za-z_]*\$`)

// createFunctionRE finds the statements whose body holds semicolons.
var createFunctionRE = regexp.MustCompile(`(?im)^[ \t]*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\b`)

// gooseStatements wraps each CREATE FUNCTION of sql in goose's StatementBegin and
// StatementEnd annotations: goose splits a file at every line that ends with a
// semicolon, which a function's body has many of. (golang-migrate sends a file whole,
// and atlas's lexer knows dollar quotes.) qualify has checked that every quote closes.
func gooseStatements(sql string) string {
	var b strings.Builder
	rest := sql
	for {
		fn := createFunctionRE.FindStringIndex(rest)
		if fn == nil {
			break
		}
		open := dollarQuoteRE.FindStringIndex(rest[fn[1]:])
		if open == nil {
			break
		}
		tag := rest[fn[1]+open[0] : fn[1]+open[1]]
		closed := fn[1] + open[1] + strings.Index(rest[fn[1]+open[1]:], tag) + len(tag)
		end := len(rest)
		if semi := strings.IndexByte(rest[closed:], ';'); semi >= 0 {
			end = closed + semi + 1
		}
		b.WriteString(rest[:fn[0]] + "-- +goose StatementBegin\n" + rest[fn[0]:end] + "\n-- +goose StatementEnd")
		rest = rest[end:]
	}
	b.WriteString(rest)
	return b.String()
}

// statementStartRE finds lines that begin a statement a rule must have covered.
var statementStartRE = regexp.MustCompile(`(?im)^[ \t]*(CREATE|ALTER|DROP|INSERT|UPDATE|DELETE|COMMENT|GRANT|REVOKE|DO|SELECT|WITH|TRUNCATE|SET|RESET|COPY|CALL|REFRESH|CLUSTER|VACUUM|ANALYZE|REINDEX|LOCK)\b`)

// qualify writes ident (a sanitized schema) before the object of every statement of sql.
// A function's body (dollar-quoted) is left as it is: its names resolve through the
// search_path the function keeps, which fromCurrentRE writes in.
func qualify(sql, ident, file string) (string, error) {
	var b strings.Builder
	for rest := sql; rest != ""; {
		open := dollarQuoteRE.FindStringIndex(rest)
		if open == nil {
			open = []int{len(rest), len(rest)}
		}
		q, err := qualifyStatements(rest[:open[0]], ident, file)
		if err != nil {
			return "", err
		}
		b.WriteString(q)
		if open[0] == len(rest) {
			break
		}
		tag := rest[open[0]:open[1]]
		end := strings.Index(rest[open[1]:], tag)
		if end < 0 {
			return "", fmt.Errorf("migration file %s: dollar quote %s is not closed", file, tag)
		}
		end += open[1] + len(tag)
		b.WriteString(rest[open[0]:end])
		rest = rest[end:]
	}
	return b.String(), nil
}

// qualifyStatements is qualify for SQL outside any dollar-quoted string.
func qualifyStatements(sql, ident, file string) (string, error) {
	out := fromCurrentRE.ReplaceAllString(sql, "${1}= "+strings.ReplaceAll(ident, "$", "$$")+", pg_temp")
	for _, re := range qualifyRules {
		var b strings.Builder
		last := 0
		for _, m := range re.FindAllStringSubmatchIndex(out, -1) {
			b.WriteString(out[last:m[3]])
			b.WriteString(ident + "." + out[m[4]:m[5]])
			last = m[5]
		}
		b.WriteString(out[last:])
		out = b.String()
	}
	// Every statement start must now name the schema on its line.
	for _, m := range statementStartRE.FindAllStringIndex(out, -1) {
		end := strings.IndexByte(out[m[0]:], '\n')
		if end < 0 {
			end = len(out) - m[0]
		}
		line := out[m[0] : m[0]+end]
		if !strings.Contains(line, ident+".") && !strings.Contains(line, "search_path = "+ident+", ") {
			return "", fmt.Errorf("migration file %s: cannot write the schema into %q: migrate sql knows CREATE TABLE, CREATE INDEX ... ON, ALTER TABLE, DROP TABLE/INDEX, INSERT INTO, DELETE FROM [USING, on its line], CREATE/DROP FUNCTION, CREATE/DROP TRIGGER and COMMENT ON", file, strings.TrimSpace(line))
		}
	}
	return out, nil
}

// renderMigrations returns every embedded migration, ascending, with schema written in,
// and the bookkeeping skiplock.Migrate keeps (schema_migrations), so that skiplock sees
// the versions applied: Migrate then finds nothing to do, and workers and CheckSchema
// accept the schema.
func renderMigrations(schema string) ([]sqlMigration, error) {
	if !schemaNameRE.MatchString(schema) || strings.HasPrefix(schema, "pg_") {
		return nil, fmt.Errorf("schema name %q is invalid: use [a-z_][a-z0-9_], 1-48 characters, not starting with \"pg_\"", schema)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	ups, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil {
		return nil, err
	}
	var out []sqlMigration
	for _, upName := range ups {
		num, rest, _ := strings.Cut(upName, "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration file %s: no version", upName)
		}
		name := strings.TrimSuffix(rest, ".up.sql")
		downName := strings.TrimSuffix(upName, ".up.sql") + ".down.sql"
		m := sqlMigration{version: v, name: name}
		for _, f := range []struct {
			file string
			dst  *string
		}{{upName, &m.up}, {downName, &m.down}} {
			b, err := fs.ReadFile(migrations.FS, f.file)
			if err != nil {
				return nil, err
			}
			if *f.dst, err = qualify(string(b), ident, f.file); err != nil {
				return nil, err
			}
		}
		// The name is a file name of ours ([a-z0-9_]): safe inside quotes.
		m.up = strings.TrimRight(m.up, "\n") + fmt.Sprintf("\n\nINSERT INTO %s (version, name) VALUES (%d, '%s');\n", table, v, name)
		m.down = strings.TrimRight(m.down, "\n") + fmt.Sprintf("\n\nDELETE FROM %s WHERE version = %d;\n", table, v)
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b sqlMigration) int { return a.version - b.version })
	if len(out) > 0 {
		// As Migrate does before the first migration: the schema and its bookkeeping table.
		out[0].up = fmt.Sprintf(`-- The schema and the table where skiplock records its applied migrations.
CREATE SCHEMA IF NOT EXISTS %s;
CREATE TABLE IF NOT EXISTS %s (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

`, ident, table) + out[0].up
	}
	return out, nil
}

// sqlFile is one file migrate sql writes.
type sqlFile struct{ name, body string }

// migrationFiles lays the migrations out as format expects.
func migrationFiles(ms []sqlMigration, format, schema string) []sqlFile {
	header := func(m sqlMigration, dir string) string {
		return fmt.Sprintf("-- skiplock migration %d (%s), %s, for schema %q.\n"+
			"-- Generated by `skiplock migrate sql`; do not edit: regenerate with a newer skiplock.\n"+
			"-- Every object is qualified with the schema here; comments below that speak of the\n"+
			"-- search_path describe skiplock.Migrate, which runs the same files unqualified.\n\n", m.version, m.name, dir, schema)
	}
	var files []sqlFile
	for _, m := range ms {
		base := fmt.Sprintf("%03d_skiplock_%s", m.version, m.name)
		switch format {
		case formatGolangMigrate:
			files = append(files, sqlFile{base + ".up.sql", header(m, "up") + m.up}, sqlFile{base + ".down.sql", header(m, "down") + m.down})
		case formatGoose:
			files = append(files, sqlFile{base + ".sql", header(m, "up and down") + "-- +goose Up\n" + gooseStatements(m.up) + "\n-- +goose Down\n" + gooseStatements(m.down)})
		case formatAtlas:
			files = append(files, sqlFile{base + ".sql", header(m, "up") + m.up})
		default: // plain
			files = append(files, sqlFile{base + ".up.sql", header(m, "up") + m.up})
		}
	}
	return files
}

// cmdMigrateSQL prints (or writes to --out) skiplock's migrations as plain SQL.
func cmdMigrateSQL(_ context.Context, a *app, o *options) error {
	ms, err := renderMigrations(a.schema)
	if err != nil {
		return usagef("migrate sql", "migrate sql: %v", err)
	}
	files := migrationFiles(ms, o.sqlFormat, a.schema)
	if o.out == "" {
		for _, f := range files {
			if _, err := fmt.Fprintf(a.stdout, "-- file: %s\n%s\n", f.name, f.body); err != nil {
				return err
			}
		}
		return nil
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("migrate sql: %w", err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(o.out, f.name), []byte(f.body), 0o644); err != nil {
			return fmt.Errorf("migrate sql: %w", err)
		}
	}
	note := ""
	if o.sqlFormat == formatAtlas {
		note = "; run `atlas migrate hash` in it to update atlas.sum"
	}
	_, err = fmt.Fprintf(a.stdout, "wrote %d files for %s, schema %q, to %s%s\n", len(files), o.sqlFormat, a.schema, o.out, note)
	return err
}
