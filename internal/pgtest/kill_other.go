//go:build !unix

package pgtest

import (
	"context"
	"errors"
)

func killTree(context.Context, int) error {
	return errors.New("killing the server's processes needs a unix system")
}

// alive cannot tell without unix signals: it says yes, and pg_ctl finds out.
func alive(int) bool { return true }
