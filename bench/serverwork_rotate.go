package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// swRotator moves the rotated variant's current generation on every 200 ms to the next
// partition if that one is empty, and truncates the partitions found empty that are not
// current. Its goroutine is owned by swRun, which stops it.
type swRotator struct {
	pool   *pgxpool.Pool
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex // round runs from the goroutine and, once, from swRun
	cur    int
	clean  [swSlots]bool // truncated since it was last current
	err    error
}

func startRotator(ctx context.Context, pool *pgxpool.Pool) *swRotator {
	rctx, cancel := context.WithCancel(ctx)
	r := &swRotator{pool: pool, cancel: cancel}
	for i := 1; i < swSlots; i++ {
		r.clean[i] = true
	}
	r.wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				r.round(rctx)
			}
		}
	})
	return r
}

// after is the generation a claim loop that found partition s empty works next: the
// first one after s, in ring order, that may hold jobs (not truncated since it was
// current), or the current one; s itself when nothing else may hold jobs.
func (r *swRotator) after(s int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 1; i <= swSlots; i++ {
		if k := (s + i) % swSlots; k == r.cur || !r.clean[k] {
			return k
		}
	}
	return s
}

func (r *swRotator) stop() error {
	r.cancel()
	r.wg.Wait()
	return r.err
}

// round truncates what it can, then moves the generation on if the next slot is clean.
func (r *swRotator) round(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range swSlots {
		if s != r.cur && !r.clean[s] && r.tryTruncate(ctx, s) {
			r.clean[s] = true
		}
	}
	next := (r.cur + 1) % swSlots
	if !r.clean[next] {
		return
	}
	if _, err := r.pool.Exec(ctx, `UPDATE sw_gen SET g = $1`, next); err != nil {
		r.fail(ctx, err)
		return
	}
	r.clean[next], r.cur = false, next
}

// tryTruncate truncates partition s if it holds no row. It looks first without a lock,
// then checks again under the ACCESS EXCLUSIVE lock TRUNCATE needs, waiting at most
// 100 ms for it (claims and enqueues queue behind a waiting lock).
func (r *swRotator) tryTruncate(ctx context.Context, s int) bool {
	part := pgx.Identifier{fmt.Sprintf("sw_rot_%d", s)}.Sanitize()
	var empty bool
	if err := r.pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM `+part+`)`).Scan(&empty); err != nil || !empty {
		r.fail(ctx, err)
		return false
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '100ms'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+part+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return errLockBusy
		}
		if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM `+part+`)`).Scan(&empty); err != nil || !empty {
			return err
		}
		_, err := tx.Exec(ctx, `TRUNCATE `+part)
		return err
	})
	if errors.Is(err, errLockBusy) {
		return false
	}
	r.fail(ctx, err)
	return err == nil && empty
}

var errLockBusy = errors.New("partition busy")

func (r *swRotator) fail(ctx context.Context, err error) {
	if err != nil && ctx.Err() == nil && r.err == nil {
		r.err = err
	}
}
