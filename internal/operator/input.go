package operator

import "errors"

// Key returns the dedupe key an operator typed or listed, normalised
// (a byte-order mark and surrounding space, no-break space included,
// removed), or an error saying why it cannot be a key (not UTF-8, control
// characters, empty, too long).
func Key(s string) (string, error) { return s, errors.New("key: not implemented") }

// Address returns the recipient address an operator typed, normalised
// (angle brackets and surrounding space removed, the domain lower-cased),
// or an error saying why it is not one address.
func Address(s string) (string, error) { return s, errors.New("address: not implemented") }
