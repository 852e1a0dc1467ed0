// This file holds listing jobs: the filters (ListParams), the keyset cursor that pages
// through them, and the statement that reads the jobs table and the archive as one.

package skiplock

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// DefaultListLimit is how many jobs [Client.List] and [Client.ListPage] return when
// [ListParams].Limit is zero.
const DefaultListLimit = 100

// ErrInvalidCursor is returned by [Client.ListPage] for a string that is not a cursor
// (cut short, not base64, another version), or one made for other filters or another
// order. The cursor's id is not signed: a cursor whose id was changed to another
// positive id is accepted, and the listing goes on from there.
var ErrInvalidCursor = errors.New("skiplock: invalid list cursor")

// ListParams selects jobs for [Client.List], [Client.ListPage] and [Client.DeleteMany].
// Jobs are read from the jobs table and the archive alike. Empty fields match everything;
// set fields must all match.
type ListParams struct {
	// Status matches jobs in this state. Queued and running jobs are only in the jobs
	// table; finished ones are in the archive (the default [CompletionArchive]) or the
	// jobs table.
	Status JobStatus
	// Queue matches jobs of this queue.
	Queue string
	// Kind matches jobs of this kind.
	Kind string
	// Metadata matches jobs whose metadata ([EnqueueOptions].Metadata) holds every one of
	// these key-value pairs. Nil or empty matches every job.
	Metadata map[string]string
	// CreatedSince and CreatedUntil match jobs enqueued at or after CreatedSince and
	// before CreatedUntil (the database clock). A zero time is no bound.
	CreatedSince, CreatedUntil time.Time
	// FinishedSince and FinishedUntil match jobs that reached a final state at or after
	// FinishedSince and before FinishedUntil. Setting either leaves out jobs that have not
	// finished. A zero time is no bound.
	FinishedSince, FinishedUntil time.Time
	// Descending lists newest first (by id). Defaults to false: oldest first.
	Descending bool
	// Cursor continues a listing after the last job of the page that returned it
	// ([ListResult].Next). It is only valid with the same filters and order. Empty means
	// from the start. [Client.DeleteMany] refuses it.
	Cursor string
	// Limit is the most jobs returned. Defaults to [DefaultListLimit] (100); zero or
	// negative means the default. [Client.DeleteMany] reads it as
	// the most jobs deleted, zero or negative meaning all that match.
	Limit int
}

// ListResult is one page of [Client.ListPage].
type ListResult struct {
	// Jobs are the page's jobs, in the order asked for.
	Jobs []*JobRow
	// Next is the cursor of the following page: pass it as [ListParams].Cursor with the
	// same filters. Empty when this page was the last (it held fewer than Limit jobs).
	Next string
}

// listSQL pages through the jobs matching listFilter in id order, after the cursor's id
// ($9, exclusive). Each table is read along its primary key from the cursor and stops
// after $10 matches, so a page costs the rows it walks over, not the table's size: the
// bound is written as a plain comparison (not "$9 IS NULL OR ...") so that it stays an
// index condition in a generic plan. The archive holds only finished jobs: the one-time
// filter skips it when the status asked for is queued or running. A job is in one table
// or the other within a statement's snapshot, so the union never returns it twice.
func listSQL(desc bool) string {
	cmp, order := ">", "id"
	if desc {
		cmp, order = "<", "id DESC"
	}
	return `(SELECT ` + jobColumns + ` FROM {s}.jobs
	WHERE id ` + cmp + ` $9 AND ` + listFilter + `
	ORDER BY ` + order + ` LIMIT $10)
UNION ALL
(SELECT ` + archiveJobColumns + ` FROM {s}.jobs_archive
	WHERE id ` + cmp + ` $9 AND ` + listFilter + ` AND ($1::text IS NULL OR $1::text NOT IN ('queued', 'running'))
	ORDER BY ` + order + ` LIMIT $10)
ORDER BY ` + order + ` LIMIT $10`
}

// listFilter is the WHERE clause of ListParams, parameters $1 to $8 (see listArgs). The
// jobs table and the archive have these columns alike. Every unset field is NULL and its
// test is true.
const listFilter = `($1::text IS NULL OR status = $1::text)
	AND ($2::text IS NULL OR queue = $2::text)
	AND ($3::text IS NULL OR kind = $3::text)
	AND ($4::jsonb IS NULL OR metadata @> $4::jsonb)
	AND ($5::timestamptz IS NULL OR created_at >= $5::timestamptz)
	AND ($6::timestamptz IS NULL OR created_at < $6::timestamptz)
	AND ($7::timestamptz IS NULL OR finished_at >= $7::timestamptz)
	AND ($8::timestamptz IS NULL OR finished_at < $8::timestamptz)`

// List returns the jobs that match p, from the jobs table and the archive, oldest first
// (newest first with Descending): the first page of [Client.ListPage], without its
// cursor.
func (c *Client) List(ctx context.Context, p ListParams) ([]*JobRow, error) {
	r, err := c.ListPage(ctx, p)
	return r.Jobs, err
}

// ListPage returns one page of the jobs that match p, from the jobs table and the
// archive, in id order (oldest first, or newest first with Descending), and the cursor
// of the next page. Paging is by keyset: a page costs the rows the two primary keys are
// walked over to find Limit matches, however deep the page, and jobs that come and go
// between pages never shift it (a job moved to the archive between two pages is found
// there, in its place). Filters that match few jobs of a large archive walk more rows.
// The pages are not one snapshot: a job's id is taken when it is inserted, so a job
// whose enqueue transaction commits after a page went past its id is on no later page
// (bound the listing with CreatedUntil, or list again, to see such jobs).
func (c *Client) ListPage(ctx context.Context, p ListParams) (ListResult, error) {
	args, err := listArgs(p)
	if err != nil {
		return ListResult{}, err
	}
	after := int64(0)
	if p.Descending {
		after = math.MaxInt64
	}
	if p.Cursor != "" {
		if after, err = decodeCursor(p.Cursor, p); err != nil {
			return ListResult{}, err
		}
	}
	limit := listLimit(p.Limit)
	rows, err := c.pool.Query(ctx, c.db.Render(listSQL(p.Descending)), append(args, after, limit)...)
	if err != nil {
		return ListResult{}, c.wrapErr("list", err)
	}
	jobs, err := collectJobs(rows)
	if err != nil {
		return ListResult{}, c.wrapErr("list", err)
	}
	res := ListResult{Jobs: jobs}
	if len(jobs) == limit {
		res.Next = encodeCursor(jobs[len(jobs)-1].ID, p)
	}
	return res, nil
}

func listLimit(n int) int {
	if n <= 0 {
		return DefaultListLimit
	}
	return n
}

// invalidParams is a ListParams that [Client.ListPage] or [Client.DeleteMany] refuses:
// it matches [ErrInvalidOptions].
func invalidParams(format string, args ...any) error {
	return &optionsError{what: "ListParams", msg: fmt.Sprintf(format, args...)}
}

// listArgs validates p's filters and returns them as listFilter's parameters $1 to $8.
// Text Postgres cannot hold (NUL, invalid UTF-8) is refused rather than sent: the kind
// would fail the statement, and JSON would write invalid UTF-8 in metadata as the
// replacement character, matching jobs tagged with that instead.
func listArgs(p ListParams) ([]any, error) {
	if p.Status != "" && !slices.Contains(allStatuses, p.Status) {
		return nil, invalidParams("status %q is not one of %v", truncate(string(p.Status), 40), allStatuses)
	}
	if p.Queue != "" {
		if err := validQueue(p.Queue); err != nil {
			return nil, err
		}
	}
	if !validText(p.Kind) {
		return nil, invalidParams("kind %q: not UTF-8 text without NUL", truncate(p.Kind, 40))
	}
	var meta any
	if len(p.Metadata) > 0 {
		for k, v := range p.Metadata {
			if !validText(k) || !validText(v) {
				return nil, invalidParams("metadata %q: %q: not UTF-8 text without NUL", truncate(k, 40), truncate(v, 40))
			}
		}
		b, err := json.Marshal(p.Metadata)
		if err != nil {
			return nil, invalidParams("metadata: %v", err)
		}
		meta = string(b) // as text: see insertOne
	}
	t := func(v time.Time) any {
		if v.IsZero() {
			return nil
		}
		return v
	}
	return []any{nullString(string(p.Status)), nullString(p.Queue), nullString(p.Kind), meta,
		t(p.CreatedSince), t(p.CreatedUntil), t(p.FinishedSince), t(p.FinishedUntil)}, nil
}

// A cursor is base64url of: a version byte, the order (0 ascending, 1 descending), the
// last id of its page (8 bytes, big-endian) and the first 8 bytes of a SHA-256 of the
// filters it was made for. Decoding checks the version, the order and the hash, so a
// cursor from another listing, a truncated one or one with a changed order is refused
// rather than silently listing something else; the id is only checked to be positive.
// Its id is no secret and gives no access: a caller who forges one only moves where its
// own listing starts.
const (
	cursorVersion = 1
	cursorLen     = 1 + 1 + 8 + 8
)

func encodeCursor(lastID int64, p ListParams) string {
	b := make([]byte, 0, cursorLen)
	b = append(b, cursorVersion, byte(b2i(p.Descending)))
	b = binary.BigEndian.AppendUint64(b, uint64(lastID))
	b = append(b, filterDigest(p)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, p ListParams) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion {
		return 0, fmt.Errorf("%w: %.40q is not a cursor from ListPage", ErrInvalidCursor, s)
	}
	if b[1] != byte(b2i(p.Descending)) {
		return 0, fmt.Errorf("%w: the cursor was made for the other order (Descending)", ErrInvalidCursor)
	}
	if string(b[10:]) != string(filterDigest(p)) {
		return 0, fmt.Errorf("%w: the cursor was made for other filters: pass the same ListParams with it", ErrInvalidCursor)
	}
	id := int64(binary.BigEndian.Uint64(b[2:10]))
	if id <= 0 {
		return 0, fmt.Errorf("%w: the cursor's id %d is out of range", ErrInvalidCursor, id)
	}
	return id, nil
}

// filterDigest hashes the filters of p (not its cursor, limit or order), so that a
// cursor is tied to them.
func filterDigest(p ListParams) []byte {
	h := sha256.New()
	w := func(s string) {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s))))
		h.Write([]byte(s))
	}
	w(string(p.Status))
	w(p.Queue)
	w(p.Kind)
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(p.Metadata))))
	for _, k := range slices.Sorted(maps.Keys(p.Metadata)) {
		w(k)
		w(p.Metadata[k])
	}
	for _, t := range []time.Time{p.CreatedSince, p.CreatedUntil, p.FinishedSince, p.FinishedUntil} {
		if t.IsZero() {
			w("")
		} else {
			w(t.UTC().Format(time.RFC3339Nano))
		}
	}
	return h.Sum(nil)[:8]
}

// b2i is 1 for true and 0 for false, to index statement variants by a flag.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
