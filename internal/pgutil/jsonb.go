// This file holds CheckJSONB: the check that a payload encoding/json produced is one
// Postgres's jsonb will take too (UTF-8, surrogate escapes, numeric's range, nesting), so a
// payload the server would refuse is refused before it can abort the caller's transaction.

package pgutil

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits of Postgres's jsonb that encoding/json does not share. Past them the server
// refuses the payload, and a refused statement aborts the caller's transaction, so
// CheckJSONB refuses it first.
const (
	// maxPayloadDepth bounds the nesting of arrays and objects. Postgres parses jsonb
	// recursively within max_stack_depth: at its smallest setting (100kB) a document
	// nested 600 deep was taken and 700 refused on Postgres 15. At the default (2MB) 10000
	// are taken, which is also encoding/json's own limit.
	maxPayloadDepth = 512
	// numericMaxDscale is the most digits a numeric keeps after the decimal point
	// (NUMERIC_DSCALE_MAX).
	numericMaxDscale = 16383
	// numericMaxDweight is one past the decimal weight of the largest numeric's first digit:
	// a numeric has at most 131072 digits before the point (its base-10000 weight is an int16).
	numericMaxDweight = 131072
	// numericMaxExponent is the largest exponent numeric_in reads: one below
	// PG_INT32_MAX/2 (found by asking the server).
	numericMaxExponent = 1<<30 - 2
	// jsonbMaxLen is the most bytes jsonb holds in one string, and in the elements of one
	// array or object (JENTRY_OFFLENMASK): past it the server refuses the document
	// ("string too long to represent as jsonb string", "total size of jsonb array
	// elements exceeds the maximum of 268435455 bytes").
	jsonbMaxLen = 1<<28 - 1
	// jsonbSizeSafe is the largest JSON document that cannot reach jsonbMaxLen: jsonb
	// stores no element in more than six times its JSON text (a one-digit number and its
	// comma, 2 bytes, take a 4-byte entry and an 8-byte numeric), so CheckJSONB sizes only
	// larger documents (checkJSONBSize).
	jsonbSizeSafe = jsonbMaxLen / 6
)

// ErrJSONBTooLarge is wrapped by CheckJSONB's error for a document that holds a string,
// array or object larger than Postgres's jsonb stores (jsonbMaxLen).
var ErrJSONBTooLarge = errors.New("larger than Postgres's jsonb holds")

// CheckJSONB rejects valid JSON that Postgres's jsonb would still refuse, so that the
// error comes before anything is sent (a refused statement would abort the caller's
// transaction): invalid UTF-8; the escape \u0000; a \u escape of half a surrogate pair
// without its other half (encoding/json escapes invalid UTF-8 as U+FFFD, so only custom
// marshalers and json.RawMessage produce these); numbers beyond numeric's range; nesting
// deeper than maxPayloadDepth; a string, array or object larger than jsonb holds (an
// error wrapping ErrJSONBTooLarge; see checkJSONBSize). b is the output of json.Marshal,
// so it is valid, compact JSON. One pass, no allocation, and a second one for a document
// of more than jsonbSizeSafe bytes.
func CheckJSONB(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	if err := CheckJSONBSize(b); err != nil {
		return err
	}
	depth := 0
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			n, err := checkJSONBString(b[i:])
			if err != nil {
				return err
			}
			i += n
		case c == '-' || c >= '0' && c <= '9':
			n, err := checkNumeric(b[i:])
			if err != nil {
				return err
			}
			i += n
		case c == '[' || c == '{':
			if depth++; depth > maxPayloadDepth {
				return fmt.Errorf("nested deeper than %d arrays and objects, which Postgres may refuse to parse (max_stack_depth)", maxPayloadDepth)
			}
			i++
		case c == ']' || c == '}':
			depth--
			i++
		default:
			i++
		}
	}
	return nil
}

// checkJSONBString checks the string (or object key) at the start of b, which begins
// with its opening quote, and returns its length. Postgres decodes every \u escape and
// refuses U+0000 and any surrogate that is not a high one directly followed by a low one.
func checkJSONBString(b []byte) (int, error) {
	high := false // the previous character was the escape of a high surrogate
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '"':
			if high {
				return 0, errors.New(`a \u escape of a high surrogate (\ud800-\udbff) ends a string: Postgres's jsonb refuses it`)
			}
			return i + 1, nil
		case '\\':
			i++
			if i >= len(b) || b[i] != 'u' || i+4 >= len(b) {
				if high {
					return 0, errors.New(`a \u escape of a high surrogate (\ud800-\udbff) is not followed by a low one: Postgres's jsonb refuses it`)
				}
				continue
			}
			r := hex4(b[i+1 : i+5])
			i += 4
			switch {
			case r == 0:
				return 0, errors.New(`contains \u0000, which Postgres cannot store in jsonb`)
			case high && (r < 0xdc00 || r > 0xdfff):
				return 0, errors.New(`a \u escape of a high surrogate (\ud800-\udbff) is not followed by a low one: Postgres's jsonb refuses it`)
			case high:
				high = false
			case r >= 0xd800 && r <= 0xdbff:
				high = true
			case r >= 0xdc00 && r <= 0xdfff:
				return 0, errors.New(`a \u escape of a low surrogate (\udc00-\udfff) without a high one before it: Postgres's jsonb refuses it`)
			}
		default:
			if high {
				return 0, errors.New(`a \u escape of a high surrogate (\ud800-\udbff) is not followed by a low one: Postgres's jsonb refuses it`)
			}
		}
	}
	return len(b), nil // unterminated: json.Marshal never returns that
}

// hex4 decodes four hex digits (valid, since the JSON is).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		}
	}
	return r
}

// checkNumeric checks the JSON number at the start of b as Postgres's numeric_in reads
// it, and returns its length. numeric keeps at most numericMaxDscale digits after the
// point, counted as the fraction's digits (trailing zeros too) minus the exponent, even
// for zero; and a non-zero value's first significant digit must have a decimal weight
// below numericMaxDweight.
func checkNumeric(b []byte) (int, error) {
	i := 0
	if b[i] == '-' {
		i++
	}
	// weight is the decimal weight (before the exponent) of the first non-zero digit, if
	// nonZero: 0 for units, -1 for tenths.
	weight, nonZero := 0, false
	intStart := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	for k := intStart; k < i && !nonZero; k++ {
		if b[k] != '0' {
			weight, nonZero = i-1-k, true
		}
	}
	fracDigits := 0
	if i < len(b) && b[i] == '.' {
		i++
		fracStart := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if !nonZero && b[i] != '0' {
				weight, nonZero = fracStart-1-i, true
			}
			i++
		}
		fracDigits = i - fracStart
	}
	exp := 0
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		neg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			neg = b[i] == '-'
			i++
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if exp = exp*10 + int(b[i]-'0'); exp > numericMaxExponent {
				return 0, fmt.Errorf("a number's exponent is beyond %d, which Postgres's numeric does not read", numericMaxExponent)
			}
			i++
		}
		if neg {
			exp = -exp
		}
	}
	if dscale := fracDigits - exp; dscale > numericMaxDscale {
		return 0, fmt.Errorf("a number has %d digits after the decimal point; Postgres's numeric keeps at most %d", dscale, numericMaxDscale)
	}
	if nonZero && weight+exp >= numericMaxDweight {
		return 0, fmt.Errorf("a number has %d digits before the decimal point; Postgres's numeric keeps at most %d", weight+exp+1, numericMaxDweight)
	}
	return i, nil
}

// CheckJSONBSize is CheckJSONB's size check alone, for JSON skiplock wrote itself (a
// sealed payload): a document of more than jsonbSizeSafe bytes holding a string, array
// or object larger than jsonb stores is refused with an error wrapping ErrJSONBTooLarge.
func CheckJSONBSize(b []byte) error {
	if len(b) > jsonbSizeSafe {
		return checkJSONBSize(b, jsonbMaxLen)
	}
	return nil
}

// checkJSONBSize checks that no string, array or object of the valid, compact JSON b
// takes more than limit bytes as jsonb, by an upper bound of what each one takes there
// (Postgres's convertToJsonb): a string its bytes in the JSON (escapes only shrink);
// an element of an array or object a 4-byte entry, plus, for a key or a string, its
// bytes, for a number up to 3 bytes of alignment and a numeric of 8 bytes and 2 per 4
// digits (a bound: 12 + digits/2), for an array or object up to 3 bytes of alignment
// and its own size; an array or object 4 bytes of header and its elements. It may refuse
// a document whose largest part is within a few percent of the limit that the server
// would still take; it never takes one the server refuses for its size. One pass; it
// allocates a stack as deep as the nesting.
func checkJSONBSize(b []byte, limit int) error {
	var open []int // the running size of each array or object not closed yet
	add := func(n int) {
		if len(open) > 0 {
			open[len(open)-1] += n
		}
	}
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			n, _ := checkJSONBString(b[i:]) // CheckJSONB refuses what it refuses
			if n-2 > limit {
				return fmt.Errorf("%w: a string of %d bytes; jsonb holds %d at most", ErrJSONBTooLarge, n-2, limit)
			}
			add(4 + n - 2)
			i += n
		case c == '-' || c >= '0' && c <= '9':
			j := i + 1
			digits := 1
			for ; j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-'); j++ {
				if b[j] >= '0' && b[j] <= '9' {
					digits++
				}
			}
			add(4 + 3 + 12 + digits/2)
			i = j
		case c == '[' || c == '{':
			open = append(open, 4) // the header
			i++
		case c == ']' || c == '}':
			size := open[len(open)-1]
			if size > limit {
				return fmt.Errorf("%w: an array or object of about %d bytes; jsonb holds %d at most", ErrJSONBTooLarge, size, limit)
			}
			open = open[:len(open)-1]
			add(4 + 3 + size)
			i++
		case c == 't' || c == 'n':
			add(4)
			i += 4
		case c == 'f':
			add(4)
			i += 5
		default: // ',' and ':'
			i++
		}
	}
	return nil
}
