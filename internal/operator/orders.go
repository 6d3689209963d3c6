package operator

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// OrderLine is one order of a `--from` file: its line number (from 1),
// the order id normalised by OrderID, and its revision (0 when the line
// names none).
type OrderLine struct {
	Line     int
	OrderID  string
	Revision int
}

// ReadOrderLines reads orders, one a line, for `mailsvc emit
// order-cancelled --from` and `mailsvc outbox republish --orders-from`:
// "ORDER" or "ORDER REVISION" (REVISION a positive integer after white
// space). It skips empty lines and lines starting with #, drops a leading
// byte-order mark and normalises each order id as OrderID does (space
// around it, no-break space included, removed). Unlike ReadKeyLines it
// refuses the whole file at its first bad line, an *InputError naming the
// line: these commands publish, and publish all or nothing of a list.
// Duplicates are kept, in file order.
func ReadOrderLines(r io.Reader) ([]OrderLine, error) {
	var out []OrderLine
	var bad *InputError
	err := eachLine(r, func(n int, line string) error {
		o, err := orderLine(line)
		if errors.As(err, &bad) {
			bad.Problem = fmt.Sprintf("line %d: %s", n, bad.Problem)
		}
		if err != nil {
			return err
		}
		o.Line = n
		out = append(out, o)
		return nil
	})
	switch {
	case bad != nil:
		return nil, bad
	case err != nil:
		return nil, fmt.Errorf("read orders: %w", err)
	}
	return out, nil
}

// orderLine parses one trimmed line: an order id, and a revision when the
// last white-space separated field of several is a number.
func orderLine(s string) (OrderLine, error) {
	id, rev := s, 0
	if i := strings.LastIndexFunc(s, isSpace); i > 0 {
		last := s[i:]
		last = strings.TrimFunc(last, isSpace)
		n, err := strconv.Atoi(last)
		if err != nil || n < 1 {
			return OrderLine{}, &InputError{Problem: "not ORDER or ORDER REVISION (a revision is a whole number from 1)", Input: cut(s)}
		}
		id, rev = s[:i], n
	}
	id, err := OrderID(id)
	if err != nil {
		return OrderLine{}, err
	}
	return OrderLine{OrderID: id, Revision: rev}, nil
}
