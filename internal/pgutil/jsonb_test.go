package pgutil

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/skiplock/skiplock/internal/pgtest"
)

// TestCheckJSONB_AgreesWithPostgres asks the server about JSON around each of jsonb's
// limits (numbers near numeric's scale and weight limits, written out and by exponent,
// surrogate escapes in every order) and checks that CheckJSONB refuses exactly what
// Postgres refuses. Each value is tried in a statement of its own, so a refusal costs
// nothing.
func TestCheckJSONB_AgreesWithPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var docs []string
	for _, e := range []string{"0", "1", "5", "16382", "16383", "16384", "131070", "131071", "131072", "131073", "1073741823", "1073741824", "2147483648"} {
		for _, sign := range []string{"", "-", "+"} {
			for _, m := range []string{"0", "1", "0.0", "1.5", "0.001", "12.34", "100", "0.5", "9999"} {
				docs = append(docs, m+"e"+sign+e)
			}
		}
	}
	for range 300 {
		intPart := "0"
		if n := rng.IntN(4); n > 0 {
			intPart = fmt.Sprint(rng.IntN(9)+1) + strings.Repeat(fmt.Sprint(rng.IntN(10)), []int{0, 10, 131071, 140000}[n]-1+rng.IntN(3))
		}
		frac := ""
		if rng.IntN(2) == 0 {
			frac = "." + strings.Repeat("0", []int{0, 5, 16380, 16383}[rng.IntN(4)]+rng.IntN(3)) + fmt.Sprint(rng.IntN(10))
		}
		exp := ""
		if rng.IntN(2) == 0 {
			exp = fmt.Sprintf("e%d", rng.IntN(40000)-20000+[]int{0, 131072, -16383, 10000}[rng.IntN(4)])
		}
		docs = append(docs, intPart+frac+exp)
	}
	escapes := []string{`\ud800`, `\udbff`, `\udc00`, `\udfff`, `\u0041`, `\u0000`, `\n`, `x`, `\\`, `\ud7ff`, `\ue000`}
	for _, a := range escapes {
		for _, b := range escapes {
			docs = append(docs, `"`+a+b+`"`, `{"`+a+b+`":[1]}`)
		}
	}
	for _, doc := range docs {
		var ok bool
		serverErr := pool.QueryRow(ctx, `SELECT $1::jsonb IS NOT NULL`, doc).Scan(&ok)
		clientErr := CheckJSONB([]byte(doc))
		if (serverErr == nil) != (clientErr == nil) {
			t.Errorf("%s: Postgres says %v, CheckJSONB says %v", doc[:min(len(doc), 60)], serverErr, clientErr)
		}
	}
}

// TestCheckJSONBSize_BoundsWhatPostgresStores asks the server how large jsonb makes
// documents of every shape (the densest: arrays of one-digit numbers; empty arrays and
// objects nested and side by side; short keys; escaped strings; long numbers) and checks
// checkJSONBSize's bound: never below what jsonb stores (it refuses each document with a
// limit one byte below the document's jsonb size), at most twice it (it takes each with
// twice that limit), and no document larger in jsonb than six times its JSON text (what
// lets CheckJSONB skip documents of at most jsonbSizeSafe bytes).
func TestCheckJSONBSize_BoundsWhatPostgresStores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	rep := func(s string, n int) string { return strings.TrimSuffix(strings.Repeat(s+",", n), ",") }
	docs := []string{
		"[" + rep("1", 5000) + "]",
		"[" + rep("0", 5000) + "]",
		"[" + rep("-1", 5000) + "]",
		"[" + rep("12345678", 3000) + "]",
		"[" + rep("1.5e-300", 3000) + "]",
		"[" + rep("[]", 5000) + "]",
		"[" + rep("{}", 5000) + "]",
		"[" + rep("[[[]]]", 2000) + "]",
		"[" + rep("true", 5000) + "]",
		"[" + rep("null", 5000) + "]",
		"[" + rep(`""`, 5000) + "]",
		"[" + rep(`"\n\u00e9\\"`, 3000) + "]",
		`{` + func() string {
			var b strings.Builder
			for i := range 5000 {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `"%d":%d`, i, i%10)
			}
			return b.String()
		}() + `}`,
		`{"a":[` + rep(`{"b":[1,2,{"c":"d"}]}`, 2000) + `],"e":"` + strings.Repeat("x", 100000) + `"}`,
		"[" + strings.Repeat("9", 131071) + "]",
		`["` + strings.Repeat("y", 300000) + `"]`,
	}
	for _, doc := range docs {
		var size int
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_column_size($1::jsonb) - 4`, doc).Scan(&size))
		name := doc[:min(len(doc), 40)]
		require.ErrorIs(t, checkJSONBSize([]byte(doc), size-1), ErrJSONBTooLarge, "%s: jsonb stores %d bytes; the bound must not be below", name, size)
		assert.NoError(t, checkJSONBSize([]byte(doc), 2*size), "%s: jsonb stores %d bytes; the bound is more than twice that", name, size)
		assert.LessOrEqual(t, size, 6*len(doc), "%s: jsonb stores more than six times the JSON text", name)
	}
}

// TestCheckJSONB_RefusesWhatJSONBCannotHold checks CheckJSONB's size refusals (the
// server's own are those of TestEnqueueTx_PayloadBeyondJSONBRefusedAndTxUsable, in the
// root package): a string, or an array, of more than jsonbMaxLen bytes in jsonb, and
// nothing of a document below jsonbSizeSafe bytes, which is not sized at all.
func TestCheckJSONB_RefusesWhatJSONBCannotHold(t *testing.T) {
	t.Parallel()
	require.ErrorIs(t, checkJSONBSize([]byte(`{"a":"`+strings.Repeat("x", 101)+`"}`), 100), ErrJSONBTooLarge, "a string over the limit")
	require.ErrorIs(t, checkJSONBSize([]byte(`[[`+strings.Repeat("1,", 20)+`1]]`), 100), ErrJSONBTooLarge, "an inner array over the limit")
	require.NoError(t, checkJSONBSize([]byte(`[[1,2],[3,4],"`+strings.Repeat("x", 60)+`"]`), 200))
	// The densest document jsonb refuses: one-digit numbers, 12 bytes each there.
	dense := []byte("[" + strings.TrimSuffix(strings.Repeat("1,", jsonbMaxLen/12+1), ",") + "]")
	require.ErrorIs(t, CheckJSONB(dense), ErrJSONBTooLarge)
	require.NoError(t, CheckJSONB(dense[:jsonbSizeSafe-1]), "not sized below jsonbSizeSafe (cut mid-array: CheckJSONB does not parse)")
}
