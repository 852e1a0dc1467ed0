package pgutil

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

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
